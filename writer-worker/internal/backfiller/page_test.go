package backfiller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// A page of 10,000 events (UUIDs: one list of them is more than
// ClickHouse's 256 KiB max_query_size), one of them 100 days older than the
// rest, half of them stored: the lookup finds exactly the stored half.
func TestStoredValuesOfALargePage(t *testing.T) {
	ctx := context.Background()
	_, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "ingest_writer", db)
	const n = 10_000
	base := time.Now().Add(-time.Hour).UnixNano()
	var rows, stored []chstore.ValueRow
	for i := range n {
		ts := base + int64(i)*int64(time.Second)
		if i == n/2 {
			ts = base - int64(100*24*time.Hour)
		}
		r := chstore.ValueRow{Entity: "e", Input: "v", TsNs: ts, ReceivedNs: base + int64(i), Serial: "dev",
			DeviceInput: "v", EventID: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), JSON: []byte("1")}
		rows = append(rows, r)
		if i%2 == 0 {
			stored = append(stored, r)
		}
	}
	if err := store.InsertValues(ctx, stored); err != nil {
		t.Fatal(err)
	}
	p := &pager{serial: "dev", store: store, entities: []string{"e"}, inputs: []string{"v"}}
	found, err := p.stored(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(stored) {
		t.Fatalf("%d values found stored, want %d", len(found), len(stored))
	}
	for _, r := range stored {
		if !found[chstore.ValueKey{Entity: r.Entity, Input: r.Input, EventID: r.EventID, DeviceInput: r.DeviceInput}] {
			t.Fatalf("stored value of %s not found", r.EventID)
		}
	}
}
