package diagsink

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// A batch whose counts are stored but whose rejections' table fails is
// finished in place once the table is back: the summing tables hold its
// counts once, not once per redelivery.
func TestAPartlyStoredBatchIsFinishedNotCountedTwice(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	_, js := testenv.Connect(t)
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	addr, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "ingest_writer", db)
	admin, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	exec := func(q string) {
		if err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	sum := func(q string) uint64 {
		var n uint64
		if err := admin.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	exec("RENAME TABLE " + db + ".device_rejections TO " + db + ".device_rejections_away")

	sink := New(js, bus.DefaultNames, settle.Limits{MaxDeliver: 100, RetryDelay: 100 * time.Millisecond, RetryMaxDelay: 100 * time.Millisecond},
		store, "test", prometheus.NewRegistry(), zap.NewNop())
	ran := make(chan error, 1)
	go func() { ran <- sink.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	at := time.Now()
	report := diag.Report{Format: diag.Format, Minute: at.Unix() / 60 * 60,
		Counts:     []diag.Count{{Serial: "dev", Kind: "invalid_token", Requests: 3}},
		Seen:       []diag.Seen{{Serial: "dev", LastNs: at.UnixNano(), Kind: "invalid_token"}},
		Rejections: []diag.Rejection{{Serial: "dev", AtNs: at.UnixNano(), Kind: "invalid_token", Message: "Invalid device token"}}}
	b, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, bus.DefaultNames.DiagSubject(), b); err != nil {
		t.Fatal(err)
	}
	stats := "SELECT sum(requests) FROM " + db + ".device_stats WHERE serial = 'dev'"
	waitFor(t, 15*time.Second, func() bool { return sum(stats) > 0 })
	time.Sleep(2 * time.Second) // a redelivery every 100 ms would have counted them again by now
	exec("RENAME TABLE " + db + ".device_rejections_away TO " + db + ".device_rejections")
	rejections := "SELECT count() FROM " + db + ".device_rejections WHERE serial = 'dev'"
	waitFor(t, 30*time.Second, func() bool { return sum(rejections) > 0 })
	if got := sum(stats); got != 3 {
		t.Errorf("device_stats counts %d requests, want 3", got)
	}
	if got := sum("SELECT sum(requests) FROM " + db + ".device_stats_hourly WHERE serial = 'dev'"); got != 3 {
		t.Errorf("device_stats_hourly counts %d requests, want 3", got)
	}
	if got := sum(rejections); got != 1 {
		t.Errorf("%d rejections stored, want 1", got)
	}
}

func waitFor(t *testing.T, limit time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", limit)
		}
	}
}
