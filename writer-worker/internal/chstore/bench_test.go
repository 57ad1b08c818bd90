package chstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/query"
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
	if err := s.pipe.conn().Exec(ctx, "INSERT INTO "+s.db+".input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
		"SELECT 'plant', 'temp', toInt64(? + number * 1000000000), toInt64(? + number * 1000000000 + 5000000), 'dev-1', 'temp', toString(number), toString(round(20 + 5 * sin(number / 600), 2)) FROM system.numbers LIMIT ?",
		startNs, startNs, n); err != nil {
		b.Fatal(err)
	}
	fromMs, toMs := start.UnixMilli(), start.Add(7*24*time.Hour).UnixMilli()
	const stepMs = 15 * 60e3
	b.ResetTimer()
	for b.Loop() {
		bs, err := s.SeriesBuckets(ctx, "plant", "temp", fromMs, toMs, stepMs, query.MaxBytes)
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

// BenchmarkSeriesYear: a year of one reading per second (31,536,000
// values) of one entity input, rolled up, charted as the console asks:
// 1 year and 30 days at points=1000 (12 h and 1 h steps, from the hour
// rollup), 7 days at a 15-minute step from the rollups and from the
// readings alone. Targets: 1 year <= 200 ms, 30 days <= 100 ms, the raw
// week no slower than BenchmarkSeriesWeek. The readings and rollups are
// made once, in database bench_series_year, and kept for later runs (drop
// it to start again).
func BenchmarkSeriesYear(b *testing.B) {
	if os.Getenv("CLICKHOUSE_TEST_ADDR") == "" {
		b.Skip("needs CLICKHOUSE_TEST_ADDR (make bench runs it against its ClickHouse)")
	}
	const db, n = "bench_series_year", 365 * 24 * 3600
	s, err := Open(Config{URL: "clickhouse://default@" + testenv.ClickHouseAddr(b) + "/" + db})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	// The year ends at the last whole hour before the data was made; it
	// is found again from the readings on later runs.
	var maxNs int64
	if err := s.pipe.conn().QueryRow(ctx, "SELECT max(ts_ns) FROM "+db+".input_values").Scan(&maxNs); err != nil {
		b.Fatal(err)
	}
	if maxNs == 0 {
		end := time.Now().Truncate(time.Hour)
		startNs := end.Add(-n * time.Second).UnixNano()
		load := time.Now()
		// A day per insert: each within the pool's read timeout.
		for day := int64(0); day < n/86400; day++ {
			if err := s.pipe.conn().Exec(ctx, "INSERT INTO "+db+".input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
				"SELECT 'plant', 'temp', toInt64(? + number * 1000000000), toInt64(? + number * 1000000000 + 5000000), 'dev-1', 'temp', toString(number), toString(round(20 + 5 * sin(number / 600), 2)) FROM system.numbers WHERE number >= ? LIMIT 86400",
				startNs, startNs, day*86400); err != nil {
				b.Fatal(err)
			}
		}
		roll := time.Now()
		if err := s.RollupAll(ctx, time.Now().UnixNano(), func() error { return nil }); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded %d readings in %v, rolled them up in %v", n, roll.Sub(load), time.Since(roll))
		maxNs = end.UnixNano() - 1e9
	}
	end := time.Unix(0, maxNs+1e9)
	s.SetRolledUp(time.Now().UnixNano())
	for _, c := range []struct {
		name   string
		span   time.Duration
		stepMs int64
		raw    bool
	}{
		{"1y", n * time.Second, 12 * 3600e3, false},
		{"30d", 30 * 24 * time.Hour, 3600e3, false},
		{"7d", 7 * 24 * time.Hour, 15 * 60e3, false},
		{"7d-raw", 7 * 24 * time.Hour, 15 * 60e3, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			rolled := time.Now().UnixNano()
			if c.raw {
				rolled = 0
			}
			s.SetRolledUp(rolled)
			from := end.Add(-c.span)
			for b.Loop() {
				bs, err := s.SeriesBuckets(ctx, "plant", "temp", from.UnixMilli(), end.UnixMilli()-1, c.stepMs, query.MaxBytes)
				if err != nil {
					b.Fatal(err)
				}
				var total uint64
				for _, bk := range bs {
					total += bk.Count
				}
				if want := uint64(c.span / time.Second); total != want {
					b.Fatalf("%d readings in %d buckets, want %d", total, len(bs), want)
				}
			}
		})
	}
}
