package backfiller

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// BenchmarkBackfillMonth: a month of one device's raw messages, one every
// 10 s with two connected inputs (259,200 messages, 518,400 readings),
// backfilled by one job as writer-worker runs it (pacing included), on an
// otherwise idle ClickHouse. Target: at least 20,000 readings/s. Needs a
// ClickHouse server (CLICKHOUSE_TEST_ADDR); run it once per -count
// (-benchtime=1x): a second run over the same messages stores nothing.
func BenchmarkBackfillMonth(b *testing.B) {
	if os.Getenv("CLICKHOUSE_TEST_ADDR") == "" {
		b.Skip("needs CLICKHOUSE_TEST_ADDR (make bench runs it against its ClickHouse)")
	}
	ctx := context.Background()
	_, db := testenv.ClickHouseDB(b)
	store := chtest.Open(b, "default", db)
	const n, every = 30 * 24 * 360, 10 * time.Second
	end := time.Now().Add(-time.Minute).Truncate(time.Second)
	start := end.Add(-n * every)
	_, js := testenv.Connect(b)
	jobs, err := backfill.Open(ctx, js, "bench_backfills", 1, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	r := New(jobs, store, nil, nil, zap.NewNop())
	inputs := []registry.Input{{Name: "temp", Entity: "boiler", EntityInput: "temp"}, {Name: "hum", Entity: "boiler", EntityInput: "hum"}}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		serial := "busy-" + string(rune('a'+i))
		// The raw log as the writer keeps it: receive time, reading time 2 s
		// earlier, the body without its token.
		if err := store.Conn().Exec(ctx, "INSERT INTO "+db+".device_messages (serial, ts_ns, event_id, payload, outcome, reading_ns, time_note, token) "+
			"SELECT ?, toInt64(? + number * ?), toString(generateUUIDv4()), concat('{\"serial\":\"', ?, '\",\"data\":{\"temp\":', toString(round(20 + 5 * sin(number / 600), 2)), ',\"hum\":', toString(number % 100), '}}'), "+
			"'No connections configured', toInt64(? + number * ? - 2000000000), '', 'token-1' FROM system.numbers LIMIT ?",
			serial, start.UnixNano(), every.Nanoseconds(), serial, start.UnixNano(), every.Nanoseconds(), n); err != nil {
			b.Fatal(err)
		}
		j := backfill.Job{ID: "bench" + serial[5:], Serial: serial, FromNs: start.UnixNano(), ToNs: end.UnixNano(), Inputs: inputs,
			State: backfill.Queued, CreatedNs: time.Now().UnixNano()}
		if err := jobs.Create(ctx, j); err != nil {
			b.Fatal(err)
		}
		if _, held, err := jobs.TakeLease(ctx, backfill.LeaseRunner, r.owner, time.Now(), leaseTTL, 0); err != nil || !held {
			b.Fatalf("lease: %v %v", held, err)
		}
		b.StartTimer()
		began := time.Now()
		if err := r.run(ctx, j); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(began)
		b.StopTimer()
		done, err := jobs.Update(ctx, serial, j.ID, func(*backfill.Job) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		var stored uint64
		if err := store.Conn().QueryRow(ctx, "SELECT count() FROM "+db+".input_values WHERE serial = ?", serial).Scan(&stored); err != nil {
			b.Fatal(err)
		}
		if done.State != backfill.Done || done.Messages != n || done.Readings != 2*n || stored != 2*n {
			b.Fatalf("backfill %+v, %d values stored; want done, %d messages, %d readings", done, stored, n, 2*n)
		}
		b.ReportMetric(float64(2*n)/elapsed.Seconds(), "readings/s")
		b.StartTimer()
	}
}
