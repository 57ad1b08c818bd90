package claimlog

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// start starts a reading of f at t0, on an empty log.
func start(f *follower) uint64 {
	return f.restart(t0, 0, 0)
}

// decided is the decision on the entry tag, failing the test unless it is
// want.
func decided(t *testing.T, f *follower, tag string, want ...Status) {
	t.Helper()
	if e, _ := f.decision(tag); !reflect.DeepEqual(e.Status, want) {
		t.Fatalf("decision on %s %v, want %v (0 held, 1 blocked, 2 unknown)", tag, e.Status, want)
	}
}

// A reading that started late cannot tell what the entries before its start
// held (their windows reach back past what the stream keeps): a claim they
// would block is unknown, never held, until a window after the start; what
// a claim known held blocks stays blocked.
func TestALateReadingHoldsNothingItCannotTell(t *testing.T) {
	f := newFollower(time.Minute, 0, "me-")
	gen := start(f)
	// Before the start: an entry whose own window the stream no longer
	// holds (a first attempt perhaps held the id before it).
	f.read(gen, 1, t0.Add(-30*time.Second), []string{"a", "b"}, "other-1", false, time.Time{})
	// After it: "a" is unknown while that entry is in its window, "b" too,
	// "c" is held.
	f.read(gen, 2, t0.Add(10*time.Second), []string{"a", "c"}, "me-1", false, time.Time{})
	decided(t, f, "me-1", Unknown, Held)
	// An unknown entry not released blocks what follows it in its window
	// as unknown; a held one blocks.
	f.read(gen, 3, t0.Add(20*time.Second), []string{"a", "c", "d"}, "me-2", false, time.Time{})
	decided(t, f, "me-2", Unknown, Blocked, Held)
	// A window after every unknown entry, "a" is free; "c" a window after
	// the entry that held it, not after the one it blocked.
	f.read(gen, 4, t0.Add(80*time.Second), []string{"a", "c"}, "me-3", false, time.Time{})
	decided(t, f, "me-3", Held, Held)
	// Entries a window old are forgotten, decisions with them.
	f.read(gen, 5, t0.Add(200*time.Second), []string{"e"}, "me-4", false, time.Time{})
	if _, ok := f.decision("me-1"); ok || len(f.ids) != 1 {
		t.Fatalf("after two windows: decision of me-1 kept %v, ids %v", ok, f.ids)
	}
	// A sequence that goes back tells of a stream numbered again: read
	// it again.
	if f.read(gen, 5, t0.Add(201*time.Second), []string{"f"}, "me-5", false, time.Time{}) {
		t.Fatal("a sequence read again was not reported")
	}
	// A message of another reading is not taken in.
	f.read(gen-1, 6, t0.Add(202*time.Second), []string{"f"}, "me-6", false, time.Time{})
	if _, ok := f.decision("me-6"); ok {
		t.Fatal("a message of an ended reading was taken in")
	}
}

// A release frees the ids of the entry it names for the entries after it,
// all of them or those it lists; a claim of 1.0.x (untagged) always holds
// (what it blocks is unknown: see below).
func TestAReleaseFreesItsEntrysIDs(t *testing.T) {
	f := newFollower(time.Minute, 0, "me-")
	gen := start(f)
	f.read(gen, 1, t0.Add(time.Second), []string{"a"}, "", false, time.Time{})
	f.read(gen, 2, t0.Add(2*time.Second), []string{"b"}, "other-1", false, time.Time{})
	f.read(gen, 3, t0.Add(3*time.Second), nil, "other-1", true, time.Time{})
	f.read(gen, 4, t0.Add(4*time.Second), []string{"c", "d"}, "other-2", false, time.Time{})
	f.read(gen, 5, t0.Add(5*time.Second), []string{"d"}, "other-2", true, time.Time{})
	f.read(gen, 6, t0.Add(6*time.Second), []string{"a", "b", "c", "d"}, "me-1", false, time.Time{})
	decided(t, f, "me-1", Unknown, Held, Blocked, Held)
}

// A message missing from the sequence (deleted: 1.0.x released its claims
// so; expired before the reading came to it) holds nothing: the reading
// goes on past it.
func TestAHoleInTheSequenceIsReadPast(t *testing.T) {
	f := newFollower(time.Minute, 0, "me-")
	gen := start(f)
	f.read(gen, 1, t0.Add(time.Second), []string{"a"}, "other-1", false, time.Time{})
	if !f.read(gen, 3, t0.Add(3*time.Second), []string{"a", "b"}, "me-1", false, time.Time{}) {
		t.Fatal("a hole in the sequence ended the reading")
	}
	decided(t, f, "me-1", Blocked, Held)
}

// A claim of 1.0.x is released by deleting it, which a reading that read
// it does not see: an entry it blocks may hold for a copy that never read
// it, so for the reading that did, that entry is unknown, not nothing.
func TestAnEntryBlockedByAnOldClaimCountsAsUnknown(t *testing.T) {
	w := time.Minute
	saw, missed := newFollower(w, 0, "saw-"), newFollower(w, 0, "missed-")
	gs, gm := start(saw), start(missed)
	saw.read(gs, 1, t0.Add(time.Second), []string{"x"}, "", false, time.Time{}) // deleted before missed read it
	for _, r := range []struct {
		f   *follower
		gen uint64
	}{{saw, gs}, {missed, gm}} {
		r.f.read(r.gen, 2, t0.Add(5*time.Second), []string{"x"}, "missed-1", false, time.Time{})
		r.f.read(r.gen, 3, t0.Add(62*time.Second), []string{"x"}, "saw-1", false, time.Time{})
	}
	decided(t, missed, "missed-1", Held)
	decided(t, saw, "saw-1", Unknown)
	// Its writer releases an entry such a claim blocks, as any it cannot
	// tell: it does not keep the retries after it unknown.
	f := newFollower(w, 0, "me-")
	gen := start(f)
	f.read(gen, 1, t0.Add(time.Second), []string{"x"}, "", false, time.Time{})
	f.read(gen, 2, t0.Add(50*time.Second), []string{"x"}, "me-1", false, time.Time{})
	decided(t, f, "me-1", Unknown)
	f.read(gen, 3, t0.Add(51*time.Second), []string{"x"}, "me-1", true, time.Time{})
	f.read(gen, 4, t0.Add(62*time.Second), []string{"x"}, "me-2", false, time.Time{})
	decided(t, f, "me-2", Held)
}

// A reading takes in nothing before it starts (generation 0), and nothing
// after it found the sequence going back.
func TestAReadingEndsWhereItCannotFollow(t *testing.T) {
	f := newFollower(time.Minute, 0, "me-")
	f.read(0, 1, t0, []string{"x"}, "me-1", false, time.Time{})
	if _, ok := f.decision("me-1"); ok {
		t.Fatal("a message taken in before the reading started")
	}
	gen := start(f)
	f.read(gen, 5, t0.Add(time.Second), []string{"a"}, "other-1", false, time.Time{})
	if f.read(gen, 3, t0.Add(2*time.Second), []string{"b"}, "other-2", false, time.Time{}) {
		t.Fatal("a sequence going back was not reported")
	}
	f.read(gen, 6, t0.Add(3*time.Second), []string{"c"}, "me-2", false, time.Time{})
	if _, ok := f.decision("me-2"); ok || f.current(gen) {
		t.Fatal("the reading went on after the sequence went back")
	}
}

// Messages missing before the one read that may have expired unread (the
// stream's first sequence is past them) may have held what the entries
// after them claim: until a window after the message following them, what
// an entry holds is unknown. A reading starts where the stream's first
// message is then, and is ready once it read to the last.
func TestAGapThatMayHaveExpiredMakesTheWindowUnknown(t *testing.T) {
	f := newFollower(time.Minute, 0, "me-")
	gen := f.restart(t0, 5, 6)
	if next, _, ok := f.next(gen); next != 5 || !ok {
		t.Fatalf("next %d %v, want 5 true", next, ok)
	}
	if !f.read(gen, 4, t0.Add(-time.Second), []string{"w"}, "other-0", false, time.Time{}) {
		t.Fatal("a reading that read nothing yet refused a message before the first sequence it was told of")
	}
	f.read(gen, 6, t0.Add(time.Second), []string{"x"}, "other-1", false, t0.Add(61*time.Second))
	select {
	case <-f.ready:
	default:
		t.Fatal("not ready after reading to the last sequence at the start")
	}
	f.read(gen, 7, t0.Add(2*time.Second), []string{"y"}, "me-1", false, time.Time{})
	decided(t, f, "me-1", Unknown)
	f.read(gen, 8, t0.Add(62*time.Second), []string{"y", "z"}, "me-2", false, time.Time{})
	decided(t, f, "me-2", Held, Held)
}

// Retries that their writing copy released (unknown to it, or blocked
// there while this copy cannot tell) do not keep a claim unknown: retries
// more often than the window are free a window after the entry from before
// the reading, not a window after the last of them.
func TestReleasedRetriesDoNotLengthenAnUnknownClaim(t *testing.T) {
	for _, tc := range []struct {
		name, writer string
		at           []time.Duration
	}{
		{"this copy's, unknown to it", "me-", []time.Duration{10 * time.Second, 30 * time.Second, 45 * time.Second}},
		{"another copy's, blocked there", "other-", []time.Duration{5 * time.Second, 15 * time.Second, 25 * time.Second, 35 * time.Second, 45 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFollower(time.Minute, 0, "me-")
			gen := start(f)
			f.read(gen, 1, t0.Add(-10*time.Second), []string{"a"}, "other-0", false, time.Time{})
			seq := uint64(2)
			for i, at := range tc.at {
				tag := tc.writer + strconv.Itoa(i+1)
				f.read(gen, seq, t0.Add(at), []string{"a"}, tag, false, time.Time{})
				if tc.writer == "me-" {
					decided(t, f, tag, Unknown)
				}
				f.read(gen, seq+1, t0.Add(at+100*time.Millisecond), []string{"a"}, tag, true, time.Time{})
				seq += 2
			}
			f.read(gen, seq, t0.Add(51*time.Second), []string{"a"}, "me-9", false, time.Time{})
			decided(t, f, "me-9", Held)
		})
	}
}

// A reading of every entry (own "", as writer-worker's) decides each,
// whichever copy wrote it; Holds says which ids an entry holds, at any
// place of it.
func TestAReadingOfEveryEntryDecidesEach(t *testing.T) {
	f := newFollower(time.Minute, 0, "")
	gen := start(f)
	f.read(gen, 1, t0.Add(time.Second), []string{"a", "b"}, "one-1", false, time.Time{})
	f.read(gen, 2, t0.Add(2*time.Second), []string{"b", "c", "c"}, "two-1", false, time.Time{})
	decided(t, f, "one-1", Held, Held)
	decided(t, f, "two-1", Blocked, Held, Blocked)
	e, _ := f.decision("two-1")
	for id, want := range map[string]bool{"a": false, "b": false, "c": true} {
		if got := e.Holds(id); got != want {
			t.Fatalf("two-1 holds %s: %v, want %v", id, got, want)
		}
	}
}

// WaitDecision returns what an entry holds once it is read, at once when
// it was read before, and ctx's error when it is not read in time.
func TestWaitingForAnEntrysDecision(t *testing.T) {
	f := newFollower(time.Minute, 0, "")
	gen := start(f)
	got := make(chan Entry, 1)
	go func() {
		e, err := f.waitDecision(context.Background(), "one-1")
		if err != nil {
			t.Error(err)
		}
		got <- e
	}()
	for registered := false; !registered; time.Sleep(time.Millisecond) { // the wait is registered
		f.mu.Lock()
		registered = len(f.byTag["one-1"]) == 1
		f.mu.Unlock()
	}
	f.read(gen, 1, t0.Add(time.Second), []string{"a"}, "one-1", false, time.Time{})
	select {
	case e := <-got:
		if !e.Holds("a") {
			t.Fatalf("decision %+v, want a held", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end when the entry was read")
	}
	if e, err := f.waitDecision(context.Background(), "one-1"); err != nil || !e.Holds("a") {
		t.Fatalf("after the read: %+v %v", e, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.waitDecision(ctx, "two-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an entry never read: %v, want the deadline", err)
	}
	if n := len(f.byTag); n != 0 {
		t.Fatalf("%d waits left after their contexts ended", n)
	}
}

// A stream that keeps entries longer than the window (bus.ClaimsKept) lets
// a reading that starts tell what the entries of the lookback hold: those
// stored since its start less the lookback are decided, those before are
// unknown, as is a claim one of those would block.
func TestAReadingLooksBackWhatTheStreamKeeps(t *testing.T) {
	f := newFollower(time.Minute, time.Minute, "")
	gen := start(f) // at t0: entries since t0 - 1 min can be told
	f.read(gen, 1, t0.Add(-90*time.Second), []string{"a"}, "old-1", false, time.Time{})
	decided(t, f, "old-1", Unknown)
	f.read(gen, 2, t0.Add(-40*time.Second), []string{"a", "b"}, "in-1", false, time.Time{})
	f.read(gen, 3, t0.Add(-30*time.Second), []string{"b"}, "in-2", false, time.Time{})
	decided(t, f, "in-1", Unknown, Held)
	decided(t, f, "in-2", Blocked)
	// Without the lookback, all three are unknown to a reading started at
	// t0.
	g := newFollower(time.Minute, 0, "")
	gen = start(g)
	g.read(gen, 1, t0.Add(-40*time.Second), []string{"b"}, "in-1", false, time.Time{})
	decided(t, g, "in-1", Unknown)
}
