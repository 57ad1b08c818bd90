package batch

import (
	"context"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
)

// An event whose earlier insert went through on the writer's replica while
// its quorum is still pending (the insert gave up waiting: ZooKeeper lost,
// a timeout) is neither stored again nor answered until the quorum
// decides; then it is answered stored, and every replica holds it once.
func TestWriterWaitsForAPendingQuorum(t *testing.T) {
	cl := testenv.ReplicatedClickHouse(t, 3)
	db := testenv.FreshDB(t, cl.Addrs[0])
	ctx := context.Background()
	if err := chtest.OpenReplicated(t, db, cl.Addrs...).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	nc, js := testenv.Connect(t)
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	r := &rig{nc: nc, js: js, store: chtest.OpenReplicated(t, db, cl.Addrs[0]), db: db}
	rowsOn := func(i int) uint64 {
		n, err := cl.Count(i, "SELECT count() FROM "+db+".input_values WHERE event_id = 'ev-pq'")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	cl.Fetches("STOP", db+".input_values")
	ev := mapped("ev-pq", outcome.Stored, `9`)
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := r.store.InsertValues(ictx, valueRows([]dedupe.Item{{Event: ev}}, []int{0}))
	cancel()
	if err == nil {
		t.Fatal("the insert returned without its quorum")
	}
	ev.MaybeStored = true // its envelope is redelivered
	replies, err := nc.SubscribeSync("test.pq")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testCfg
	cfg.Limits.NotReadyDelay = 200 * time.Millisecond
	r.run(t, cfg)
	r.publish(t, "env-pq", withReply(ev, "test.pq"))
	if m, err := replies.NextMsg(3 * time.Second); err == nil {
		t.Fatalf("answered while the quorum was pending: %s", m.Data)
	}
	if n := rowsOn(0); n != 1 {
		t.Fatalf("replica 1 holds %d rows of the event while its quorum is pending, want 1", n)
	}
	cl.Fetches("START", db+".input_values")
	m, err := replies.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no answer once the quorum could be reached: %v", err)
	}
	reps, err := event.DecodeReplies(m.Data)
	if err != nil || len(reps) != 1 || reps[0].Code != outcome.Stored {
		t.Fatalf("reply = %+v, %v, want stored", reps, err)
	}
	for i := range cl.Addrs {
		deadline := time.Now().Add(20 * time.Second)
		for rowsOn(i) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d holds %d rows of the event, want 1", i+1, rowsOn(i))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
