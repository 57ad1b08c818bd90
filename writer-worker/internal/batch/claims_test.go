package batch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// entry writes the claims log entry tagged tag listing ids, as an
// ingest-api copy does.
func (r *rig) entry(t *testing.T, tag string, ids ...string) {
	t.Helper()
	msg := &nats.Msg{Subject: bus.DefaultNames.ClaimLogSubject(tag), Data: []byte(strings.Join(ids, "\n")),
		Header: nats.Header{nats.MsgIdHdr: {tag}}}
	if _, err := r.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// publishTagged sends one keyed envelope of ms tagged with the entry tag,
// as the mapper does with an events message ingest-api sent with its
// claims.
func (r *rig) publishTagged(t *testing.T, id, tag string, ms ...event.Mapped) {
	t.Helper()
	msg := &nats.Msg{Subject: bus.DefaultNames.MappedSubject(), Data: event.AppendEnvelope(nil, ms),
		Header: nats.Header{nats.MsgIdHdr: {id}, bus.ClaimedHeader: {"1"}, bus.ClaimTagHeader: {tag}}}
	if _, err := r.js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// An envelope tagged with its claims log entry stores the events whose
// claims the entry holds; an event whose claim an earlier entry holds (a
// retry) stores nothing, is not answered, and its claim is released; an
// envelope whose entry is not read yet comes back until it is.
func TestWriterStoresOnlyWhatTheEntryHolds(t *testing.T) {
	r := newRig(t)
	sub, err := r.nc.SubscribeSync("test.tagged")
	if err != nil {
		t.Fatal(err)
	}
	w := r.run(t, testCfg)
	r.entry(t, "first-1", "k-a")
	r.entry(t, "retry-1", "k-a", "k-b")
	r.publishTagged(t, "env-1", "retry-1",
		withReply(keyed(mapped("k-a", outcome.Stored, `2`)), "test.tagged"),
		withReply(keyed(mapped("k-b", outcome.Stored, `1`)), "test.tagged"))
	if rep := nextReply(t, sub); rep.ID != "k-b" || rep.Code != outcome.Stored {
		t.Fatalf("held: %+v", rep)
	}
	r.await(t, "device_messages", "k-b", 1)
	for _, table := range []string{"input_values", "device_messages", "event_keys"} {
		if n := r.count(t, table, "k-a"); n != 0 {
			t.Fatalf("%s holds %d rows of the retry k-a", table, n)
		}
	}
	// The retry's claim is released: the entry's free lists it.
	st, err := r.js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := st.GetLastMsgForSubject(context.Background(), bus.DefaultNames.ClaimFreeSubject("retry-1"))
		if err == nil {
			if string(m.Data) != "k-a" {
				t.Fatalf("free of retry-1 lists %q, want k-a", m.Data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dropped retry's claim was not released: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The first attempt's envelope stores its value.
	r.publishTagged(t, "env-2", "first-1", withReply(keyed(mapped("k-a", outcome.Stored, `1`)), "test.tagged"))
	if rep := nextReply(t, sub); rep.ID != "k-a" || rep.Code != outcome.Stored {
		t.Fatalf("first attempt: %+v", rep)
	}
	// An envelope ahead of its entry comes back until the entry is read.
	r.publishTagged(t, "env-3", "late-1", withReply(keyed(mapped("k-c", outcome.Stored, `3`)), "test.tagged"))
	for testutil.ToFloat64(w.m.unread) == 0 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("the envelope ahead of its entry was not sent back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatal("an envelope whose entry was not read was answered")
	}
	r.entry(t, "late-1", "k-c")
	if rep := nextReply(t, sub); rep.ID != "k-c" || rep.Code != outcome.Stored {
		t.Fatalf("after its entry: %+v", rep)
	}
	r.await(t, "device_messages", "k-a", 1)
	for id, want := range map[string]uint64{"k-a": 1, "k-b": 1, "k-c": 1} {
		if n := r.count(t, "input_values", id); n != want {
			t.Errorf("input_values holds %d rows of %s, want %d", n, id, want)
		}
	}
	for v, want := range map[verdict]float64{keep: 3, release: 1, drop: 0, ifStored: 0} {
		if got := testutil.ToFloat64(w.m.verdicts[v]); got != want {
			t.Errorf("claim_verdicts_total{verdict=%s} = %v, want %v", verdictNames[v], got, want)
		}
	}
}

// verdictOf: held is kept; blocked is dropped and released, even when
// redelivered or replayed; what the reading cannot tell is dropped (not
// released) on a first delivery and answered only if found stored on a
// later one, as is an event whose entry was given up; a replay the reading
// cannot tell is kept (the record's checks decide).
func TestVerdicts(t *testing.T) {
	ev := &event.Mapped{ID: "e1"}
	bk := &event.Mapped{ID: "m1", Group: "b"}
	replay := &event.Mapped{ID: "e1", Replay: true}
	of := func(st claimlog.Status) claimlog.Entry {
		return claimlog.Entry{IDs: []string{"e1"}, Status: []claimlog.Status{st}}
	}
	for _, c := range []struct {
		name  string
		e     claimlog.Entry
		st    entryState
		ev    *event.Mapped
		check bool
		want  verdict
	}{
		{"held", of(claimlog.Held), entryRead, ev, false, keep},
		{"held redelivered", of(claimlog.Held), entryRead, ev, true, keep},
		{"a backlog's claim", claimlog.Entry{IDs: []string{"b"}, Status: []claimlog.Status{claimlog.Held}}, entryRead, bk, false, keep},
		{"held at one place, blocked at another", claimlog.Entry{IDs: []string{"e1", "e1"}, Status: []claimlog.Status{claimlog.Blocked, claimlog.Held}}, entryRead, ev, false, keep},
		{"blocked", of(claimlog.Blocked), entryRead, ev, false, release},
		{"blocked redelivered", of(claimlog.Blocked), entryRead, ev, true, release},
		{"blocked replayed", of(claimlog.Blocked), entryRead, replay, true, release},
		{"unknown", of(claimlog.Unknown), entryRead, ev, false, drop},
		{"unknown redelivered", of(claimlog.Unknown), entryRead, ev, true, ifStored},
		{"unknown replayed", of(claimlog.Unknown), entryRead, replay, true, keep},
		{"not listed", claimlog.Entry{IDs: []string{"x"}, Status: []claimlog.Status{claimlog.Held}}, entryRead, ev, false, drop},
		{"entry given up", claimlog.Entry{}, entryGone, ev, true, ifStored},
		{"entry given up, replayed", claimlog.Entry{}, entryGone, replay, true, keep},
	} {
		if got := verdictOf(c.e, c.st, c.ev, c.check); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, verdictNames[got], verdictNames[c.want])
		}
	}
}

// fakeClaims is a reading that has decided the entries in decided, and is
// caught up when caught is.
type fakeClaims struct {
	decided map[string]claimlog.Entry
	caught  bool
	waited  int
}

func (f *fakeClaims) Decision(tag string) (claimlog.Entry, bool) {
	e, ok := f.decided[tag]
	return e, ok
}
func (f *fakeClaims) WaitDecision(ctx context.Context, tag string) (claimlog.Entry, error) {
	f.waited++
	<-ctx.Done()
	return claimlog.Entry{}, ctx.Err()
}
func (f *fakeClaims) CaughtUp() bool                               { return f.caught }
func (f *fakeClaims) Free(context.Context, string, []string) error { return nil }

// entryOf: a decided entry is read at once; one not read is waited for
// once, on a first delivery, then sent back while the reading catches up
// and for entryTries deliveries, then given up.
func TestEntryOf(t *testing.T) {
	held := claimlog.Entry{IDs: []string{"e1"}, Status: []claimlog.Status{claimlog.Held}}
	f := &fakeClaims{decided: map[string]claimlog.Entry{"t-1": held}}
	w := &Writer{claims: f}
	budget := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	for _, c := range []struct {
		name      string
		tag       string
		delivered uint64
		caught    bool
		want      entryState
		waits     int
	}{
		{"decided", "t-1", 1, false, entryRead, 0},
		{"not read, first delivery", "t-2", 1, true, entryWait, 1},
		{"not read, redelivered", "t-2", 5, true, entryWait, 0},
		{"not read past the tries", "t-2", entryTries + 1, true, entryGone, 0},
		{"not read past the tries, the reading behind", "t-2", entryTries + 1, false, entryWait, 0},
	} {
		f.caught, f.waited = c.caught, 0
		e, st := w.entryOf(budget, c.tag, c.delivered)
		if st != c.want || f.waited != c.waits || (st == entryRead && !e.Holds("e1")) {
			t.Errorf("%s: state %d after %d waits, want %d after %d", c.name, st, f.waited, c.want, c.waits)
		}
	}
}
