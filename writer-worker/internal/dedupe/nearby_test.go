package dedupe

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// spans records the reading-time span of each lookup on a real store.
type spans struct {
	*chstore.Store
	asked [][2]int64
}

func (s *spans) StoredEvents(ctx context.Context, entities, ids []string, minNs, maxNs int64) (map[string]chstore.Presence, error) {
	s.asked = append(s.asked, [2]int64{minNs, maxNs})
	return s.Store.StoredEvents(ctx, entities, ids, minNs, maxNs)
}

// A redelivered batch that mixes a reading from 100 days ago with current
// ones is checked against ClickHouse in lookups that each read only their
// own readings' span: not the 14,400 readings stored in between.
func TestAnOldReadingCostsALookupOfItsOwn(t *testing.T) {
	ctx := context.Background()
	_, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "ingest_writer", db)
	now := time.Now().Truncate(time.Second)
	old := now.Add(-100 * 24 * time.Hour).UnixNano()
	row := func(id string, ts int64) chstore.ValueRow {
		return chstore.ValueRow{Entity: "e", Input: "v", TsNs: ts, ReceivedNs: ts, Serial: "dev", DeviceInput: "v", EventID: id, JSON: []byte("1")}
	}
	var between []int64
	var rows []chstore.ValueRow
	for ts := old + int64(10*time.Minute); ts < now.Add(-time.Hour).UnixNano(); ts += int64(10 * time.Minute) {
		between = append(between, ts)
		rows = append(rows, row(fmt.Sprintf("between-%d", ts), ts))
	}
	// The batch: two old readings (one stored before) and 50 current ones
	// (every other one stored before), all redelivered.
	var items []Item
	stored := map[string]bool{}
	add := func(id string, ts int64, before bool) {
		items = append(items, Item{Check: true, Event: event.Mapped{ID: id, Outcome: outcome.Stored, ReceivedNs: now.UnixNano(), ReadingNs: ts,
			Values: []event.Value{{Entity: "e", Input: "v", JSON: []byte("1")}}}})
		if before {
			stored[id] = true
			rows = append(rows, row(id, ts))
		}
	}
	add("old-stored", old, true)
	add("old-new", old+int64(time.Second), false)
	for i := range 50 {
		add(fmt.Sprintf("now-%d", i), now.Add(time.Duration(i)*time.Second).UnixNano(), i%2 == 0)
	}
	if err := store.InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}

	rec := &spans{Store: store}
	if err := New(rec, fakeKeys{}).Mark(ctx, items); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if it.SkipValues != stored[it.Event.ID] {
			t.Errorf("%s: skip %v, want %v (stored before)", it.Event.ID, it.SkipValues, stored[it.Event.ID])
		}
	}
	if len(rec.asked) != 2 {
		t.Errorf("%d lookups, want 2 (the old readings, the current ones): %v", len(rec.asked), rec.asked)
	}
	for _, span := range rec.asked {
		read := 0
		for _, ts := range between {
			if ts >= span[0] && ts <= span[1] {
				read++
			}
		}
		if read > 0 {
			t.Errorf("a lookup over %v..%v spans %d of the %d readings stored in between",
				time.Unix(0, span[0]).UTC(), time.Unix(0, span[1]).UTC(), read, len(between))
		}
	}
}
