package idem

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
)

// keyRows stands for event_keys.
type keyRows map[string]time.Time

func (k keyRows) EachKey(_ context.Context, sinceNs int64, fn func(string, int64)) error {
	for id, at := range k {
		if at.UnixNano() >= sinceNs {
			fn(id, at.UnixNano())
		}
	}
	return nil
}

// gatedRows is event_keys read once per token sent on gate.
type gatedRows struct {
	rows keyRows
	gate chan struct{}
}

func (g gatedRows) EachKey(ctx context.Context, sinceNs int64, fn func(string, int64)) error {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.rows.EachKey(ctx, sinceNs, fn)
}

// claimOf writes an entry of the claims log listing id and another id.
func claimOf(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	if _, err := js.Publish(context.Background(), bus.DefaultNames.ClaimLogSubject("tag-"+id), []byte("beside-"+id+"\n"+id)); err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
}

// oldClaimOf takes a claim on id as copies of 1.0.x do: a message of its
// own on the id's subject.
func oldClaimOf(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	if _, err := js.Publish(context.Background(), bus.DefaultNames.ClaimSubject(id), nil, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
}

// runSeen runs a Seen over keys, with claims held hold, fed by a reading
// of the claims log on js (claimlog, the writer's one reading).
func runSeen(t *testing.T, js jetstream.JetStream, keys KeyFeed, hold time.Duration) *Seen {
	t.Helper()
	s := NewSeen(keys, 24*time.Hour, 1<<20, zap.NewNop())
	s.hold = hold
	ctx, cancel := context.WithCancel(context.Background())
	l, err := claimlog.Open(ctx, js, bus.DefaultNames, "", s, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- s.Run(ctx) }()
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return s
}

// delivered waits until the feed has taken in the claim of id.
func delivered(t *testing.T, s *Seen, id string) {
	t.Helper()
	eventually(t, "claim "+id+" delivered", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, h := range s.held {
			if h.id == id {
				return true
			}
		}
		return s.f != nil && s.f.has(id)
	})
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

// Against a real JetStream: an event is a known first attempt when no
// claim of its id is older than hold and event_keys has no row of it in
// the window; before the filter is complete, and after its reading may have lost claims,
// nothing is known.
func TestSeenTellsFirstAttempts(t *testing.T) {
	_, js := testenv.Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rows := keyRows{"settled-earlier": now.Add(-time.Hour), "past-window": now.Add(-25 * time.Hour)}
	oldClaimOf(t, js, "claimed-before-start")
	keys := gatedRows{rows: rows, gate: make(chan struct{}, 1)}
	keys.gate <- struct{}{} // the read at the start
	s := runSeen(t, js, keys, 300*time.Millisecond)
	eventually(t, "complete", s.Complete)
	if s.FirstAttempt("settled-earlier") || !s.FirstAttempt("past-window") || !s.FirstAttempt("never-seen") {
		t.Fatalf("settled-earlier %v past-window %v never-seen %v; want false true true",
			s.FirstAttempt("settled-earlier"), s.FirstAttempt("past-window"), s.FirstAttempt("never-seen"))
	}
	// Its own claim, younger than hold, does not make an event a repeat;
	// past hold, the claim stands for an earlier attempt.
	claimOf(t, js, "fresh")
	// A release lists the ids it frees: it claims none of them.
	if _, err := js.Publish(context.Background(), bus.DefaultNames.ClaimReleaseSubject("tag-other"), []byte("only-released")); err != nil {
		t.Fatal(err)
	}
	delivered(t, s, "fresh")
	if !s.FirstAttempt("fresh") {
		t.Fatal("an event whose claim was just taken is not a first attempt")
	}
	eventually(t, "a claim older than hold counts as an earlier attempt", func() bool { return !s.FirstAttempt("fresh") })
	if s.FirstAttempt("beside-fresh") {
		t.Fatal("the other id of the claims log entry was not taken in")
	}
	if !s.FirstAttempt("only-released") {
		t.Fatal("an id a release lists was taken for a claim")
	}
	eventually(t, "a claim taken before the start counts", func() bool { return !s.FirstAttempt("claimed-before-start") })

	// A feed not known caught up lately answers nothing, until the next
	// check finds it caught up.
	s.mu.Lock()
	s.caughtUpAt = time.Now().Add(-2 * s.fresh)
	s.mu.Unlock()
	if s.FirstAttempt("never-seen") {
		t.Fatal("a feed not known caught up still answers")
	}
	eventually(t, "caught up again", func() bool { return s.FirstAttempt("never-seen") })

	// The reading tells of claims that may have expired unread: nothing
	// is known until event_keys is read again (a row written since the
	// first read stands for an attempt whose claim was lost).
	rows["stored-while-lost"] = time.Now()
	s.Read(time.Now(), time.Now(), nil, false, true)
	if s.Complete() || s.FirstAttempt("never-seen") {
		t.Fatal("a reading that may have lost claims still answers")
	}
	keys.gate <- struct{}{}
	eventually(t, "complete again", s.Complete)
	if s.FirstAttempt("stored-while-lost") || s.FirstAttempt("fresh") || s.FirstAttempt("settled-earlier") || !s.FirstAttempt("never-seen") {
		t.Fatal("event_keys not read again, the filter lost what it held, or it holds what it never saw")
	}
}

// A backlog's messages share its one claim (event.ClaimID): a message is a
// known first attempt only while neither its claim nor its own id stands
// for an earlier attempt: the claim past hold (the feed), or its id in
// event_keys (an attempt before the feed's start).
func TestSeenTellsBacklogFirstAttemptsByTheirClaim(t *testing.T) {
	_, js := testenv.Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	s := runSeen(t, js, keyRows{"old-0": time.Now().Add(-time.Hour)}, 300*time.Millisecond)
	eventually(t, "complete", s.Complete)
	ids, claims := []string{"new-0", "new-1", "old-0", "old-1"}, []string{"new", "new", "old", "old"}
	firsts := func() []bool { return s.FirstAttempts(ids, claims) }
	if got := firsts(); !got[0] || !got[1] || got[2] || !got[3] {
		t.Fatalf("before any claim: %v, want [true true false true]", got)
	}
	claimOf(t, js, "new")
	delivered(t, s, "new")
	if got := firsts(); !got[0] || !got[1] {
		t.Fatalf("the backlog's own claim, younger than hold, made a repeat: %v", got)
	}
	eventually(t, "the claim past hold stands for an earlier attempt of each message", func() bool {
		got := firsts()
		return !got[0] && !got[1] && !got[2] && got[3]
	})
	if !s.FirstAttempt("new-0") {
		t.Fatal("the claim of a backlog made a repeat of a single reading it does not name")
	}
}

// A claim on a backlog message's own id comes from a copy of 1.0.0 (a
// claim per message): however young, it stands for an earlier attempt of
// that message when the message comes again under its backlog's one claim.
func TestSeenLooksUpBacklogMessagesAnOldCopyClaimed(t *testing.T) {
	_, js := testenv.Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	s := runSeen(t, js, keyRows{}, time.Hour)
	eventually(t, "complete", s.Complete)
	claimOf(t, js, "msg-0")
	delivered(t, s, "msg-0")
	if got := s.FirstAttempts([]string{"msg-0", "msg-1"}, []string{"backlog", "backlog"}); got[0] || !got[1] {
		t.Fatalf("backlog messages %v, want [false true]: msg-0 had an attempt under a claim of its own", got)
	}
	if !s.FirstAttempt("msg-0") {
		t.Fatal("a single reading's own young claim made it a repeat")
	}
}

// A claim delivered late (a copy starting while claims older than hold are
// in the stream, and no claim after them) joins the filter as old as it is,
// not hold after its delivery.
func TestSeenTimesClaimsByTheirStreamTime(t *testing.T) {
	_, js := testenv.Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	claimOf(t, js, "taken-long-ago")
	time.Sleep(2500 * time.Millisecond)
	s := runSeen(t, js, keyRows{}, 2*time.Second)
	// No claim comes after it: the clocks are compared through the
	// consumer's info.
	eventually(t, "complete", s.Complete)
	if s.FirstAttempt("taken-long-ago") {
		t.Fatal("a claim taken more than hold before its delivery is not yet in the filter")
	}
	claimOf(t, js, "taken-now")
	delivered(t, s, "taken-now")
	if !s.FirstAttempt("taken-now") {
		t.Fatal("a claim taken less than hold ago is already in the filter")
	}
}

// A nil Seen (none given to the record) knows nothing: every keyed event is
// looked up.
func TestNoSeen(t *testing.T) {
	var s *Seen
	if s.FirstAttempt("x") || s.Complete() {
		t.Fatal("a nil Seen answers")
	}
}

// Claims lost before a reading's first message (expired before it came)
// are covered by the read of event_keys its start asked for only if that
// read had not begun: once it has, event_keys is read again (a row written
// after it began stands for an attempt whose claim was lost).
func TestSeenReadsEventKeysAgainForClaimsLostAfterTheStartsRead(t *testing.T) {
	rows := keyRows{}
	keys := gatedRows{rows: rows, gate: make(chan struct{}, 2)}
	keys.gate <- struct{}{} // the first reading's start
	keys.gate <- struct{}{} // the second's
	s := NewSeen(keys, 24*time.Hour, 1<<20, zap.NewNop())
	asked := func() uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.asked
	}
	complete := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.complete()
	}
	now := time.Now()
	s.Restarted()
	s.Read(now, now, []string{"first"}, false, true)
	if asked() != 1 {
		t.Fatalf("claims lost before the first message, the start's read not begun: %d reads asked, want 1", asked())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "complete", complete)

	s.Restarted() // a reading again; its start's read runs and ends
	eventually(t, "complete again", complete)
	rows["stored-after-the-read-began"] = time.Now()
	s.Read(time.Now(), time.Now(), []string{"late-first"}, false, true)
	if complete() || asked() != 3 {
		t.Fatalf("claims lost after the start's read began: complete %v, %d reads asked; want false, 3", complete(), asked())
	}
	keys.gate <- struct{}{}
	eventually(t, "complete after reading event_keys again", complete)
	s.mu.Lock()
	found := s.f.has("stored-after-the-read-began")
	s.mu.Unlock()
	if !found {
		t.Fatal("event_keys was not read again")
	}
}
