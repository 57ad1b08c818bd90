package dedupe

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

type fakeStored map[string]chstore.Presence

func (f fakeStored) StoredEvents(_ context.Context, _, ids []string, _, _ int64) (map[string]chstore.Presence, error) {
	if f == nil {
		return nil, errors.New("clickhouse down")
	}
	out := map[string]chstore.Presence{}
	for _, id := range ids {
		if p := f[id]; p != chstore.Absent {
			out[id] = p
		}
	}
	return out, nil
}

type fakeKeys map[string]outcome.Code

// FirstAttempts: ids named first-* whose claims are too are known first
// attempts.
func (f fakeKeys) FirstAttempts(ids, claims []string) []bool {
	first := make([]bool, len(ids))
	for i, id := range ids {
		first[i] = strings.HasPrefix(id, "first-") && strings.HasPrefix(claims[i], "first-")
	}
	return first
}

func (f fakeKeys) Lookup(_ context.Context, ids []string) (map[string]outcome.Code, error) {
	out := map[string]outcome.Code{}
	for _, id := range ids {
		if c, ok := f[id]; ok {
			out[id] = c
		}
	}
	return out, nil
}

func ev(id string, keyed bool, code outcome.Code) event.Mapped {
	return event.Mapped{ID: id, Keyed: keyed, Outcome: code, ReceivedNs: 1, ReadingNs: 1,
		Values: []event.Value{{Entity: "e", Input: "i", JSON: []byte(`1`)}}}
}

func TestMark(t *testing.T) {
	items := []Item{
		{Event: ev("new", false, outcome.Stored)},
		{Event: ev("redelivered-stored", false, outcome.Stored), Check: true},
		{Event: ev("redelivered-not-stored", false, outcome.Stored), Check: true},
		{Event: ev("redelivered-unsettled", false, outcome.Stored), Check: true},
		{Event: ev("copy", false, outcome.Stored)},
		{Event: ev("copy", false, outcome.Stored)},
		{Event: ev("k-answered", true, outcome.Stored)},
		{Event: ev("k-dead", true, outcome.Stored)},
		{Event: func() event.Mapped { m := ev("k-dead-replayed", true, outcome.Stored); m.Replay = true; return m }(), Check: true},
		{Event: ev("k-twice", true, outcome.NoConnections)},
		{Event: ev("k-twice", true, outcome.Stored)},
	}
	c := New(fakeStored{"redelivered-stored": chstore.Stored, "redelivered-unsettled": chstore.Unsettled}, fakeKeys{
		"k-answered": outcome.NoConnections, "k-dead": outcome.StorageFailed, "k-dead-replayed": outcome.StorageFailed})
	if err := c.Mark(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	type want struct {
		skip, repeat bool
		prior        outcome.Code
		unsettled    bool
	}
	for i, w := range []want{
		{false, false, 0, false},
		{true, false, 0, false},
		{false, false, 0, false},
		{true, false, 0, true}, // an earlier insert may yet be stored: neither stored again nor answered
		{false, false, 0, false},
		{true, false, 0, false}, // the second copy in the batch
		{true, true, outcome.NoConnections, false},
		{true, true, outcome.StorageFailed, false}, // a retry of a dead letter: answered so, nothing stored
		{false, false, 0, false},                   // its replay may store
		{false, false, 0, false},
		{true, true, outcome.NoConnections, false}, // the first copy's outcome holds
	} {
		it := items[i]
		if it.SkipValues != w.skip || it.Repeat != w.repeat || (w.repeat && it.Prior != w.prior) || it.Unsettled != w.unsettled {
			t.Errorf("item %d (%s): skip %v repeat %v prior %v, want %+v", i, it.Event.ID, it.SkipValues, it.Repeat, it.Prior, w)
		}
	}
}

func TestMarkFailsWhenClickHouseCannotBeRead(t *testing.T) {
	items := []Item{{Event: ev("x", false, outcome.Stored), Check: true}}
	if err := New(fakeStored(nil), fakeKeys{}).Mark(context.Background(), items); err == nil {
		t.Fatal("a failed lookup must fail the batch, not let it store blind")
	}
}

// askedKeys records the ids each Lookup asked about.
type askedKeys struct {
	fakeKeys
	asked [][]string
}

func (a *askedKeys) Lookup(ctx context.Context, ids []string) (map[string]outcome.Code, error) {
	a.asked = append(a.asked, slices.Clone(ids))
	return a.fakeKeys.Lookup(ctx, ids)
}

// A first delivery of a claimed, known first attempt costs no lookup; a
// redelivery of one, an event not known so, and an event that took no
// claim (an ingest-api copy of an earlier release) are looked up; copies
// within the batch are caught either way.
func TestFirstAttemptsAreNotLookedUp(t *testing.T) {
	keys := &askedKeys{fakeKeys: fakeKeys{"k-old": outcome.Stored}}
	c := New(fakeStored{}, keys)
	items := []Item{
		{Event: ev("first-a", true, outcome.Stored), Claimed: true},
		{Event: ev("first-a", true, outcome.Stored), Claimed: true},
		{Event: ev("first-b", true, outcome.Stored), Claimed: true, Check: true},
		{Event: ev("k-old", true, outcome.Stored), Claimed: true},
		{Event: ev("first-d", true, outcome.Stored)}, // from a copy that takes no claims
	}
	if err := c.Mark(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if len(keys.asked) != 1 || !slices.Equal(keys.asked[0], []string{"first-b", "k-old", "first-d"}) {
		t.Fatalf("looked up %v, want [[first-b k-old first-d]]", keys.asked)
	}
	if items[0].Repeat || !items[1].Repeat || items[1].Prior != outcome.Stored || items[2].Repeat || !items[3].Repeat {
		t.Fatalf("marks %+v", items)
	}
	keys.asked = nil
	if err := c.Mark(context.Background(), []Item{{Event: ev("first-c", true, outcome.Stored), Claimed: true}}); err != nil || len(keys.asked) != 0 {
		t.Fatalf("a batch of first attempts looked up %v (%v), want nothing", keys.asked, err)
	}
	// Backlog messages are asked about by their own ids and their
	// backlog's one claim (here, messages of two backlogs): either one
	// not known for a first costs a lookup.
	keys.asked = nil
	backlog := []Item{{Event: ev("first-e", true, outcome.Stored), Claimed: true}, {Event: ev("first-f", true, outcome.Stored), Claimed: true}}
	backlog[0].Event.Group, backlog[1].Event.Group = "first-g", "k-g"
	if err := c.Mark(context.Background(), backlog); err != nil || len(keys.asked) != 1 || !slices.Equal(keys.asked[0], []string{"first-f"}) {
		t.Fatalf("a backlog looked up %v (%v), want [[first-f]]", keys.asked, err)
	}
}

// An event the writer may store only if an earlier delivery did (IfStored)
// is dropped when none did, before the other checks: a copy of it later in
// the batch, which its claims log entry holds, is then stored, not taken
// for a repeat of the dropped one. One found stored, recorded, or pending
// is kept and answered as before.
func TestIfStoredIsDecidedBeforeTheOtherChecks(t *testing.T) {
	items := []Item{
		{Event: ev("k-gone", true, outcome.Stored), Check: true, IfStored: true},
		{Event: ev("k-gone", true, outcome.Stored)},
		{Event: ev("k-stored", true, outcome.Stored), Check: true, IfStored: true},
		{Event: ev("k-recorded", true, outcome.Stored), Check: true, IfStored: true},
		{Event: ev("k-pending", true, outcome.Stored), Check: true, IfStored: true},
	}
	c := New(fakeStored{"k-stored": chstore.Stored, "k-pending": chstore.Unsettled}, fakeKeys{"k-recorded": outcome.Stored})
	if err := c.Mark(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	type want struct{ drop, skip, repeat, unsettled bool }
	for i, w := range []want{
		{true, true, false, false},   // no earlier delivery stored it: dropped
		{false, false, false, false}, // the copy its entry holds: stored
		{false, true, false, false},  // stored before: answered, not stored again
		{false, true, true, false},   // recorded: its outcome
		{false, true, false, true},   // pending: comes back
	} {
		it := items[i]
		if it.Drop != w.drop || it.SkipValues != w.skip || it.Repeat != w.repeat || it.Unsettled != w.unsettled {
			t.Errorf("item %d (%s): drop %v skip %v repeat %v unsettled %v, want %+v", i, it.Event.ID, it.Drop, it.SkipValues, it.Repeat, it.Unsettled, w)
		}
	}
}
