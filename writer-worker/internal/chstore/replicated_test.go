package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// Replays fold on replicated storage: the same batch inserted again through
// another replica (a writer that failed over and retried) is dropped by the
// replicated table's block deduplication, and the writer's check of stored
// events sees, on any replica, rows inserted through another one.
func TestReplicatedInsertsFold(t *testing.T) {
	cl := testenv.ReplicatedClickHouse(t, 3)
	db := testenv.FreshDB(t, cl.Addrs[0])
	open := func(addrs ...string) *Store {
		s, err := Open(Config{URL: "clickhouse://default@" + strings.Join(addrs, ",") + "/" + db + "?insert_quorum=2", Replicated: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx := context.Background()
	all := open(cl.Addrs...)
	if err := all.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := all.Migrate(ctx); err != nil {
		t.Fatalf("replicated schema is not idempotent: %v", err)
	}
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var rows []ValueRow
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("ev-%d", i)
		rows = append(rows, ValueRow{Entity: "rep", Input: "t", TsNs: base + int64(i), ReceivedNs: base + int64(i), Serial: "d", DeviceInput: "t", EventID: id, JSON: json.RawMessage(fmt.Sprint(i))})
		ids = append(ids, id)
	}
	if err := open(cl.Addrs[0]).InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// The same batch again, through replica 2.
	if err := open(cl.Addrs[1]).InsertValues(ctx, rows); err != nil {
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
	found, err := open(cl.Addrs[2]).StoredEvents(ctx, []string{"rep"}, ids, base, base+100)
	if err != nil || len(found) != 20 || found["ev-0"] != Stored {
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
	open := func(addrs ...string) *Store {
		s, err := Open(Config{URL: "clickhouse://default@" + strings.Join(addrs, ",") + "/" + db + "?insert_quorum=2", Replicated: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx := context.Background()
	if err := open(cl.Addrs...).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := open(cl.Addrs[0]) // inserts and checks on replica 1
	fetches := func(verb string) {
		for _, addr := range cl.Addrs[1:] {
			if err := cl.Exec(addr, "SYSTEM "+verb+" FETCHES "+db+".input_values"); err != nil {
				t.Fatal(err)
			}
		}
	}
	fetches("STOP")
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var rows []ValueRow
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("pq-%d", i)
		rows = append(rows, ValueRow{Entity: "pq", Input: "t", TsNs: base + int64(i), ReceivedNs: base + int64(i), Serial: "d", DeviceInput: "t", EventID: id, JSON: json.RawMessage(fmt.Sprint(i))})
		ids = append(ids, id)
	}
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
		if found[id] != Unsettled {
			t.Fatalf("while its quorum is pending, %s is %v, want unsettled (all: %v)", id, found[id], found)
		}
	}
	fetches("START")
	deadline := time.Now().Add(30 * time.Second)
	for {
		found, err = s.StoredEvents(ctx, []string{"pq"}, ids, base, base+100)
		if err == nil && len(found) == len(ids) && found[ids[0]] == Stored && found[ids[4]] == Stored {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fetches resumed: %v (%v), want every event stored", found, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
