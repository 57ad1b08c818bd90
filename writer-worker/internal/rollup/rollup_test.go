package rollup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// A backlog of marks far over one query's budget (3,000 minutes of one
// input, 60,000 readings, marked at once, as a large backfill leaves
// them), under a ClickHouse that fails any query reading more than 50,000
// rows (as the year's single query failed on the memory limit): the
// rollup works it off in chunks within its budget, splits a chunk that
// does not fit instead of repeating it, computes each minute once, and
// its progress passes the backlog.
func TestABacklogOfMarksIsWorkedOffInChunks(t *testing.T) {
	// Bounded by minutes: 500 of them (10,000 readings) fit. Bounded by
	// rows only: the first query, of every minute, does not fit in 45,000
	// (ClickHouse counts whole granules of 8,192 rows, the marks' too) and
	// is split until they do.
	for name, budget := range map[string]Budget{"minutes": {Minutes: 500}, "rows": {Minutes: 3000, Rows: 45_000}} {
		t.Run(name, func(t *testing.T) { workOffBacklog(t, budget) })
	}
}

func workOffBacklog(t *testing.T, budget Budget) {
	_, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "ingest_writer", db)
	_, js := testenv.Connect(t)
	setup := context.Background()
	leases, err := backfill.Open(setup, js, "rollup_leases", 1, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	const minutes, perMinute = 3000, 20
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var rows []chstore.ValueRow
	for m := range minutes {
		for k := range perMinute {
			ts := start.Add(time.Duration(m)*time.Minute + time.Duration(k)*3*time.Second).UnixNano()
			rows = append(rows, chstore.ValueRow{Entity: "e", Input: "i", TsNs: ts, ReceivedNs: ts, Serial: "s", DeviceInput: "i",
				EventID: fmt.Sprint(m, "-", k), JSON: []byte(fmt.Sprint(k))})
		}
	}
	if err := store.InsertValues(setup, rows); err != nil {
		t.Fatal(err)
	}
	// One part: ClickHouse estimates the rows a query reads by granules
	// (8,192 rows) of each part.
	if err := store.Conn().Exec(setup, "OPTIMIZE TABLE "+db+".input_values FINAL"); err != nil {
		t.Fatal(err)
	}
	marked := time.Now().Add(-time.Minute).UnixNano()
	if err := store.InsertMarks(setup, marked, chstore.MarksOf(rows)); err != nil {
		t.Fatal(err)
	}
	// The rollup had done every mark before the backlog (a lease that
	// expired an hour ago).
	if _, _, err := leases.TakeLease(setup, backfill.LeaseRollup, "earlier", time.Now().Add(-time.Hour), time.Minute, marked-1); err != nil {
		t.Fatal(err)
	}

	// Any query of this test reading more than 50,000 rows fails.
	ctx := clickhouse.Context(setup, clickhouse.WithSettings(clickhouse.Settings{"max_rows_to_read": 50_000}))
	r := New(leases, store, 10*365*24*time.Hour, budget, prometheus.NewRegistry(), zap.NewNop())
	var errs []error
	for range 3 {
		err := r.Step(ctx, time.Now())
		if store.RolledUp() >= marked {
			break
		}
		errs = append(errs, err)
	}
	if store.RolledUp() < marked {
		t.Fatalf("the rollup's progress is %d after 3 steps, before the backlog marked at %d: %v", store.RolledUp(), marked, errs)
	}
	if got := testutil.ToFloat64(r.minutes); got != minutes {
		t.Errorf("%v minutes computed, want each of the %d once", got, minutes)
	}
	if splits := testutil.ToFloat64(r.splits); (budget.Rows > 0) != (splits > 0) {
		t.Errorf("%v queries split, with a budget of %d rows (a query of every minute reads 81,920)", splits, budget.Rows)
	}
	for _, c := range []struct {
		table        string
		buckets, sum uint64
	}{{"input_minutes", minutes, minutes * perMinute}, {"input_hours", minutes / 60, minutes * perMinute}} {
		var n, sum uint64
		q := "SELECT count(), sum(r) FROM (SELECT bucket, argMax(readings, version) AS r FROM " + db + "." + c.table + " GROUP BY bucket)"
		if err := store.Conn().QueryRow(setup, q).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if n != c.buckets || sum != c.sum {
			t.Errorf("%s holds %d buckets of %d readings, want %d of %d", c.table, n, sum, c.buckets, c.sum)
		}
	}
}
