package chstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// Replays fold on replicated storage: the same batch inserted again through
// another replica (a writer that failed over and retried) is dropped by the
// replicated table's block deduplication, and the writer's check of stored
// events sees, on any replica, rows inserted through another one.
func TestReplicatedInsertsFold(t *testing.T) {
	cl := testenv.ReplicatedClickHouse(t, 3)
	db := testenv.FreshDB(t, cl.Addrs[0])
	ctx := context.Background()
	all := chtest.OpenReplicated(t, db, cl.Addrs...)
	if err := all.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := all.Migrate(ctx); err != nil {
		t.Fatalf("replicated schema is not idempotent: %v", err)
	}
	rows, ids, base := readings("rep", "ev", 20)
	if err := chtest.OpenReplicated(t, db, cl.Addrs[0]).InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// The same batch again, through replica 2.
	if err := chtest.OpenReplicated(t, db, cl.Addrs[1]).InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	for i := range cl.Addrs {
		var n uint64
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for {
			n, err = cl.Count(i, "SELECT count() FROM "+db+".input_values")
			if (err == nil && n >= 20) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil || n != 20 {
			t.Fatalf("replica %d holds %d rows (%v), want the 20 once", i+1, n, err)
		}
	}
	// The check a redelivery runs, on replica 3, finds every event.
	found, err := chtest.OpenReplicated(t, db, cl.Addrs[2]).StoredEvents(ctx, []string{"rep"}, ids, base, base+100)
	if err != nil || len(found) != 20 || found["ev-0"] != chstore.Stored {
		t.Fatalf("stored events seen on replica 3: %d (%v), want 20", len(found), err)
	}
}

// An insert that gave up waiting for its quorum (the other replicas do not
// fetch) may still be stored: its part is on the replica written to, and
// reaches the others when they fetch. A redelivery's check must not take
// it for absent and store the events again: it reports them unsettled
// until the quorum decides, then stored.
func TestReplicatedPendingQuorumIsUnsettled(t *testing.T) {
	cl := testenv.ReplicatedClickHouse(t, 3)
	db := testenv.FreshDB(t, cl.Addrs[0])
	ctx := context.Background()
	if err := chtest.OpenReplicated(t, db, cl.Addrs...).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := chtest.OpenReplicated(t, db, cl.Addrs[0]) // inserts and checks on replica 1
	cl.Fetches("STOP", db+".input_values")
	rows, ids, base := readings("pq", "pq", 5)
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := s.InsertValues(ictx, rows)
	cancel()
	if err == nil {
		t.Fatal("the insert returned without its quorum")
	}
	found, err := s.StoredEvents(ctx, []string{"pq"}, ids, base, base+100)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if found[id] != chstore.Unsettled {
			t.Fatalf("while its quorum is pending, %s is %v, want unsettled (all: %v)", id, found[id], found)
		}
	}
	cl.Fetches("START", db+".input_values")
	deadline := time.Now().Add(30 * time.Second)
	for {
		found, err = s.StoredEvents(ctx, []string{"pq"}, ids, base, base+100)
		if err == nil && len(found) == len(ids) && found[ids[0]] == chstore.Stored && found[ids[4]] == chstore.Stored {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fetches resumed: %v (%v), want every event stored", found, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// readings are n rows of entity's input t, one a nanosecond from base
// (returned), with event ids prefix-0 .. prefix-(n-1).
func readings(entity, prefix string, n int) (rows []chstore.ValueRow, ids []string, base int64) {
	base = time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		rows = append(rows, chstore.ValueRow{Entity: entity, Input: "t", TsNs: base + int64(i), ReceivedNs: base + int64(i), Serial: "d", DeviceInput: "t", EventID: id, JSON: json.RawMessage(fmt.Sprint(i))})
		ids = append(ids, id)
	}
	return rows, ids, base
}
