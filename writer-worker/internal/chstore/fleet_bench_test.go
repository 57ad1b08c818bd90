package chstore

import (
	"context"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// BenchmarkFleetOfTenThousand: the fleet view of 10,000 devices with 30
// days of hourly counts (7.2 M rows of device_stats_hourly), a tenth of them
// quiet for 2 hours (interval 10 s: silent), the rest seen a minute ago.
// Reports the p50 (and p99) of 20 reads.
func BenchmarkFleetOfTenThousand(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	const devices, hours = 10_000, 720
	now := time.Now()
	hour := now.Unix() / 3600 * 3600
	if err := s.pipe.conn().Exec(ctx, "INSERT INTO "+s.db+".device_stats_hourly (serial, hour, kind, requests, readings) "+
		"SELECT concat('dev-', toString(number % ?)), toInt64(? - intDiv(number, ?) * 3600), 'stored', 360, 360 FROM system.numbers LIMIT ?",
		devices, hour-3*3600, devices, devices*hours); err != nil {
		b.Fatal(err)
	}
	if err := s.pipe.conn().Exec(ctx, "INSERT INTO "+s.db+".device_seen (serial, last_ns, kind) "+
		"SELECT concat('dev-', toString(number)), toInt64(? - if(number % 10 = 0, 7200, 60) * 1000000000), 'stored' FROM system.numbers LIMIT ?",
		now.UnixNano(), devices); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range 20 {
			t0 := time.Now()
			f, err := s.Fleet(ctx, now.Add(-24*time.Hour).UnixNano(), now.UnixNano(), now)
			took = append(took, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			if len(f.Silent) != maxFleet || f.Silent[0].IntervalS < 9 || f.Silent[0].IntervalS > 11 {
				b.Fatalf("silent: %d, first %+v; want %d devices 10 s apart", len(f.Silent), f.Silent[0], maxFleet)
			}
		}
	}
	testenv.ReportLatency(b, took)
}
