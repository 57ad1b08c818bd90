package rollup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// The catch-up rate: a backlog of days of one input at a reading a second,
// every minute marked at once, worked off with DefaultBudget from the
// first step (docs/performance.md, "Rollup catch-up").
func BenchmarkRollupCatchUp(b *testing.B) {
	const days = 7
	readings, minutes := days*86400, days*1440
	for range b.N {
		_, db := testenv.ClickHouseDB(b)
		store := chtest.Open(b, "default", db)
		_, js := testenv.Connect(b)
		ctx := context.Background()
		leases, err := backfill.Open(ctx, js, "rollup_leases", 1, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
		marked := time.Now().Add(-time.Minute).UnixNano()
		for _, q := range []string{
			fmt.Sprintf("INSERT INTO %s.input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
				"SELECT 'e', 'i', %d + number * 1000000000, %d + number * 1000000000, 's', 'i', toString(number), toString(number %% 100) FROM numbers(%d)",
				db, start, start, readings),
			fmt.Sprintf("INSERT INTO %s.rollup_dirty (marked_ns, entity, input, minute) SELECT %d, 'e', 'i', %d + number * 60 FROM numbers(%d)",
				db, marked, start/1e9, minutes),
			"OPTIMIZE TABLE " + db + ".input_values FINAL",
		} {
			if err := store.Conn().Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := leases.TakeLease(ctx, backfill.LeaseRollup, "earlier", time.Now().Add(-time.Hour), time.Minute, marked-1); err != nil {
			b.Fatal(err)
		}
		r := New(leases, store, 10*365*24*time.Hour, DefaultBudget, prometheus.NewRegistry(), zap.NewNop())
		b.ResetTimer()
		t0 := time.Now()
		if err := r.Step(ctx, time.Now()); err != nil || store.RolledUp() < marked {
			b.Fatalf("step: %v; progress %d, marks at %d", err, store.RolledUp(), marked)
		}
		took := time.Since(t0).Seconds()
		b.StopTimer()
		b.ReportMetric(float64(minutes)/took, "marks/s")
		b.ReportMetric(float64(readings)/took, "readings/s")
	}
}
