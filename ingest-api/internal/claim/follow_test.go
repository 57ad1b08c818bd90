package claim

import (
	"reflect"
	"testing"
	"time"
)

// A reading that started late cannot tell what the entries before its start
// held (their windows reach back past what the stream keeps): a claim they
// would block is unknown, never held, until a window after the start; what
// a claim known held blocks stays blocked.
func TestALateReadingHoldsNothingItCannotTell(t *testing.T) {
	w := time.Minute
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	f := newFollower(w, "me-")
	f.restart(t0, 0)
	// Before the start: an entry whose own window the stream no longer
	// holds (a first attempt perhaps held the id before it).
	f.read(1, t0.Add(-30*time.Second), []string{"a", "b"}, "other-1", false)
	// After it: "a" is unknown while that entry is in its window, "b" too,
	// "c" is held.
	f.read(2, t0.Add(10*time.Second), []string{"a", "c"}, "me-1", false)
	if got, _ := f.decision("me-1"); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Fatalf("decision %v, want [false true]", got)
	}
	// An unknown entry blocks what follows it in its window as unknown;
	// a held one blocks.
	f.read(3, t0.Add(20*time.Second), []string{"a", "c", "d"}, "me-2", false)
	if got, _ := f.decision("me-2"); !reflect.DeepEqual(got, []bool{false, false, true}) {
		t.Fatalf("decision %v, want [false false true]", got)
	}
	// A window after every unknown entry, "a" is free; "c" a window after
	// the entry that held it, not after the one it blocked.
	f.read(4, t0.Add(80*time.Second), []string{"a", "c"}, "me-3", false)
	if got, _ := f.decision("me-3"); !reflect.DeepEqual(got, []bool{true, true}) {
		t.Fatalf("decision %v, want [true true]", got)
	}
	// Entries a window old are forgotten, decisions with them.
	f.read(5, t0.Add(200*time.Second), []string{"e"}, "me-4", false)
	if _, ok := f.decision("me-1"); ok || len(f.ids) != 1 {
		t.Fatalf("after two windows: decision of me-1 kept %v, ids %v", ok, f.ids)
	}
	// A message missing between two read is lost, and one numbered again
	// tells of a stream that lost its last: read again.
	if f.read(7, t0.Add(201*time.Second), []string{"f"}, "me-5", false) {
		t.Fatal("a gap in the sequence was not reported")
	}
	if f.read(5, t0.Add(201*time.Second), []string{"f"}, "me-5", false) {
		t.Fatal("a sequence read again was not reported")
	}
}

// A release frees the ids of the entry it names for the entries after it;
// a claim of 1.0.x (untagged) always holds.
func TestAReleaseFreesItsEntrysIDs(t *testing.T) {
	w := time.Minute
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	f := newFollower(w, "me-")
	f.restart(t0, 0)
	f.read(1, t0.Add(time.Second), []string{"a"}, "", false)
	f.read(2, t0.Add(2*time.Second), []string{"b"}, "other-1", false)
	f.read(3, t0.Add(3*time.Second), nil, "other-1", true)
	f.read(4, t0.Add(4*time.Second), []string{"a", "b"}, "me-1", false)
	if got, _ := f.decision("me-1"); !reflect.DeepEqual(got, []bool{false, true}) {
		t.Fatalf("decision %v, want [false true]", got)
	}
}
