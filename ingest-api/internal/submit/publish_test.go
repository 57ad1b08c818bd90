package submit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
)

// stream starts a server with a stream on "ev.>" and returns a JetStream
// context and a function that reads every message's events, in order (and
// its ClaimedHeader, last, when it has one).
func stream(t *testing.T) (jetstream.JetStream, func(want int) [][]string) {
	t.Helper()
	_, js := testenv.Connect(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(want int) [][]string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if int(info.State.Msgs) >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		var msgs [][]string
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				break
			}
			evs, err := event.DecodeEvents(m.Data)
			if err != nil {
				t.Fatalf("message %d: %v", seq, err)
			}
			var ids []string
			for _, e := range evs {
				ids = append(ids, e.ID)
			}
			if v := m.Header.Get(bus.ClaimedHeader); v != "" {
				ids = append(ids, bus.ClaimedHeader+"="+v)
			}
			msgs = append(msgs, ids)
		}
		return msgs
	}
	return js, read
}

func ev(id string, payload int) *event.Event {
	return &event.Event{ID: id, Serial: "s", Payload: []byte(strings.Repeat("x", payload))}
}

// lim is limits of claims taken before publishing (CLAIM_FIRST).
func lim(perMessage, maxBytes int) limits {
	return limits{batcher.Config{MaxItems: perMessage, MaxSize: maxBytes, Slots: 1}, time.Second, true}
}

// sub is a submission of evs.
// sub is a submission of evs, keyed when claimID is not "".
func sub(claimID string, evs ...*event.Event) *submission {
	for _, e := range evs {
		e.Keyed = claimID != ""
	}
	return newSubmission(evs, claimID)
}

// publishAll adds subs to p and runs it until it has published them.
func publishAll(t *testing.T, p *publisher, subs []*submission) {
	t.Helper()
	for _, s := range subs {
		if err := p.add(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.run(ctx); err != nil {
		t.Fatal(err)
	}
}

// toldTaken fails the test unless each of subs was told, of its events,
// that the ids want[i] are taken (claim.ErrTaken), and nothing else.
func toldTaken(t *testing.T, subs []*submission, want [][]string) {
	t.Helper()
	for i := range subs {
		var taken []string
		for _, r := range refusals(subs[i]) {
			if !errors.Is(r.err, claim.ErrTaken) {
				t.Fatalf("submission %d: %v", i, r.err)
			}
			taken = append(taken, r.ids...)
		}
		if !reflect.DeepEqual(taken, want[i]) {
			t.Fatalf("submission %d was told %v are taken, want %v", i, taken, want[i])
		}
	}
}

// toldNotStored adds s to p, runs p until the test ends, and returns why s
// was refused, failing the test unless it was told within wait that its
// events are certainly not stored (not claim.ErrTaken).
func toldNotStored(t *testing.T, p *publisher, s *submission, wait time.Duration) error {
	t.Helper()
	if err := p.add(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = p.run(ctx) }()
	select {
	case r := <-s.refused:
		if r.err == nil || errors.Is(r.err, claim.ErrTaken) || !NotStored(r.err) {
			t.Fatalf("refusal reported as %v", r.err)
		}
		return r.err
	case <-time.After(wait):
		t.Fatal("refusal not reported")
	}
	return nil
}

// refusals is what s was told, without waiting.
func refusals(s *submission) []refusal {
	var out []refusal
	for {
		select {
		case r := <-s.refused:
			out = append(out, r)
		default:
			return out
		}
	}
}

// Submissions that arrive while no message can go out share messages, up
// to the limits, in arrival order, a backlog's events together; once
// running, a submission on an idle publisher goes out at once, alone.
func TestSubmissionsGatherWhileThePublisherIsBusyAndGoAloneWhenIdle(t *testing.T) {
	js, read := stream(t)
	var sizes []int
	p := newPublisher("ev.in", lim(3, 3*event.EnvelopeCost(ev("", 10))), js, nil, func(n int) { sizes = append(sizes, n) }, zap.NewNop())
	var subs []*submission
	add := func(s *submission) {
		if err := p.add(s); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	// Not running yet: as if every slot were taken.
	for i := range 4 {
		add(sub("", ev(fmt.Sprint("a", i), 10)))
	}
	add(sub("", ev("big", 200)))                           // fits beside neither a3 nor the backlog by bytes
	add(sub("", ev("g0", 10), ev("g1", 10), ev("g2", 10))) // a backlog: one unit
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.run(ctx) }()
	want := [][]string{{"a0", "a1", "a2"}, {"a3"}, {"big"}, {"g0", "g1", "g2"}}
	if got := read(4); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	add(sub("", ev("b0", 10)))
	read(5)
	add(sub("", ev("b1", 10)))
	want = append(want, []string{"b0"}, []string{"b1"})
	if got := read(6); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sizes, []int{3, 1, 1, 3, 1, 1}) {
		t.Fatalf("observed sizes %v", sizes)
	}
	for _, s := range subs {
		if r := refusals(s); r != nil {
			t.Fatalf("a stored message reported refused: %v", r)
		}
	}
}

// A message the stream refuses refuses every submission in it, with the
// reason, and says the events are certainly not stored.
func TestARefusedMessageRefusesItsSubmissions(t *testing.T) {
	js, _ := stream(t)
	p := newPublisher("nostream.in", lim(10, 1<<20), js, nil, nil, zap.NewNop())
	a, b := sub("", ev("a", 1)), sub("", ev("b1", 1), ev("b2", 1))
	for _, s := range []*submission{a, b} {
		if err := p.add(s); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.run(ctx) }()
	for _, s := range []*submission{a, b} {
		select {
		case r := <-s.refused:
			if r.err == nil || !NotStored(r.err) || len(r.ids) != len(s.evs) {
				t.Fatalf("refusal %+v", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("refusal not reported")
		}
	}
}

// Stopping publishes what was added before, and refuses what comes after.
func TestStopPublishesWhatItHolds(t *testing.T) {
	js, read := stream(t)
	p := newPublisher("ev.in", lim(2, 1<<20), js, nil, nil, zap.NewNop())
	for i := range 5 {
		if err := p.add(sub("", ev(fmt.Sprint(i), 1))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.add(sub("", ev("late", 1))); !errors.Is(err, batcher.ErrClosed) {
		t.Fatalf("add after stop: %v", err)
	}
	if got, want := read(3), [][]string{{"0", "1"}, {"2", "3"}, {"4"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
}

// Keyed submissions take their claims, one each and all in one entry,
// and gather into messages of their own: a message, and the envelope made
// of it, is all keyed or all unkeyed. A submission whose claim another
// attempt holds is told so for all its events and stays out.
func TestKeyedSubmissionsAreClaimedAndGoInMessagesOfTheirOwn(t *testing.T) {
	js, read := stream(t)
	claims := openClaims(t, js)
	if held := takeAll(t, claims, "k-held"); !held[0] {
		t.Fatal("k-held not taken")
	}
	p := newPublisher("ev.in", lim(10, 1<<20), js, claims, nil, zap.NewNop())
	subs := []*submission{sub("", ev("u0", 1)), sub("k0", ev("k0", 1)), sub("", ev("u1", 1)),
		sub("k-held", ev("k1", 1), ev("k2", 1)), sub("k0", ev("k0", 1)), sub("kb", ev("kb0", 1), ev("kb1", 1))}
	publishAll(t, p, subs)
	got := read(2)
	slices.SortFunc(got, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	if want := [][]string{{"k0", "kb0", "kb1", "Events-Claimed=1"}, {"u0", "u1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	toldTaken(t, subs, [][]string{nil, nil, nil, {"k1", "k2"}, {"k0"}, nil})
	// Every submission that went out holds its one claim; no event took
	// one of its own.
	held := takeAll(t, claims, "k0", "kb", "kb0", "kb1", "k1")
	for i, want := range []bool{true, true, false, false, false} {
		if taken := !held[i]; taken != want {
			t.Fatalf("claim %d after publishing: taken %v, want %v", i, taken, want)
		}
	}
}

// When the stream refuses a keyed message (here: full), its submissions are
// told why and their claims are released: a retry is processed anew.
func TestARefusedKeyedMessageReleasesItsClaims(t *testing.T) {
	js, _ := stream(t)
	claims := openClaims(t, js)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.in"}, MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), "full.in", []byte("x")); err != nil {
		t.Fatal(err)
	}
	p := newPublisher("full.in", lim(10, 1<<20), js, claims, nil, zap.NewNop())
	toldNotStored(t, p, sub("k-refused", ev("k-refused", 1)), 5*time.Second)
	if held := takeAll(t, claims, "k-refused"); !held[0] {
		t.Fatal("the claim was not released")
	}
}

// A keyed message that no stream answers (as while a stream's leader is
// elected) may yet be stored: it is sent again under its message id while
// its request waits, and stored once when the stream answers; its claim
// stands and nobody is told of a refusal.
func TestAKeyedMessageNoStreamAnsweredIsSentAgain(t *testing.T) {
	js, _ := stream(t)
	claims := openClaims(t, js)
	p := newPublisher("late.in", lim(10, 1<<20), js, claims, nil, zap.NewNop())
	s := sub("k-late", ev("k-late", 1))
	if err := p.add(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.run(ctx) }()
	// The first publish finds no stream (nats.go tries twice more within
	// 500 ms on its own); then the message is sent again.
	time.Sleep(1500 * time.Millisecond)
	if p.resend.started.Load() == 0 {
		t.Fatal("the message no stream answered was not sent again")
	}
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.in"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	eventually("the message was not stored once the stream answered", func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
	if got := refusals(s); len(got) != 0 {
		t.Fatalf("the request was told %v", got[0].err)
	}
	if held := takeAll(t, claims, "k-late"); held[0] {
		t.Fatal("the claim does not stand")
	}
	m, err := st.GetMsg(context.Background(), 1)
	if err != nil || m.Header.Get(nats.MsgIdHdr) == "" || m.Header.Get(bus.ClaimedHeader) != "1" {
		t.Fatalf("stored message %+v (%v): want a message id and the claimed mark", m, err)
	}
	cancel()
	<-done
}

func openClaims(t testing.TB, js jetstream.JetStream) *claim.Claims {
	t.Helper()
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26,
		Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	claims, err := claim.Open(ctx, js, bus.DefaultNames, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- claims.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-claims.Ready()
	return claims
}

// takeAll takes the claims of ids in an entry of its own: whether each
// holds.
func takeAll(t testing.TB, claims *claim.Claims, ids ...string) []bool {
	t.Helper()
	_, held, err := claims.TakeAll(context.Background(), ids, claims.Tag())
	if err != nil {
		t.Fatal(err)
	}
	return held
}
