package chstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// BenchmarkSeriesWeek: a week of one reading per second (604,800 values) of
// one entity input, aggregated as the console's 7-day chart asks for it
// (points=1000, a 15-minute step: 673 buckets). Target: at most 200 ms.
// Needs a ClickHouse server (CLICKHOUSE_TEST_ADDR); `make bench` runs it
// against the stack's.
func BenchmarkSeriesWeek(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	const n = 7 * 24 * 3600
	start := time.Now().Add(-7 * 24 * time.Hour).Truncate(time.Second)
	startNs := start.UnixNano()
	// Generated in ClickHouse: the rows as the writer stores them.
	if err := s.conn.Exec(ctx, "INSERT INTO "+s.db+".input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
		"SELECT 'plant', 'temp', toInt64(? + number * 1000000000), toInt64(? + number * 1000000000 + 5000000), 'dev-1', 'temp', toString(number), toString(round(20 + 5 * sin(number / 600), 2)) FROM system.numbers LIMIT ?",
		startNs, startNs, n); err != nil {
		b.Fatal(err)
	}
	fromMs, toMs := start.UnixMilli(), start.Add(7*24*time.Hour).UnixMilli()
	const stepMs = 15 * 60e3
	b.ResetTimer()
	for b.Loop() {
		bs, err := s.SeriesBuckets(ctx, "plant", "temp", fromMs, toMs, stepMs)
		if err != nil {
			b.Fatal(err)
		}
		var total uint64
		for _, bk := range bs {
			total += bk.Count
		}
		if total != n || len(bs) < 672 || len(bs) > 673 {
			b.Fatalf("%d buckets holding %d readings, want 672-673 holding %d", len(bs), total, n)
		}
	}
}

// benchStore is a store on a fresh database of the benchmarks' ClickHouse
// server (CLICKHOUSE_TEST_ADDR; skipped without one), closed at the end.
func benchStore(b *testing.B) *Store {
	b.Helper()
	if os.Getenv("CLICKHOUSE_TEST_ADDR") == "" {
		b.Skip("needs CLICKHOUSE_TEST_ADDR (make bench runs it against its ClickHouse)")
	}
	addr, db := testenv.ClickHouseDB(b)
	s, err := Open(Config{URL: "clickhouse://default@" + addr + "/" + db})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}
