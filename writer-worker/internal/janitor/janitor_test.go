package janitor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

type rig struct {
	store *chstore.Store
	conn  driver.Conn
	db    string
}

func newRig(t *testing.T) rig {
	t.Helper()
	addr, db := testenv.ClickHouseDB(t)
	s := chtest.Open(t, "ingest_writer", db)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rig{store: s, conn: conn, db: db}
}

func (r rig) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if err := r.conn.Exec(context.Background(), fmt.Sprintf(q, r.db), args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (r rig) count(t *testing.T, q string, args ...any) uint64 {
	t.Helper()
	var n uint64
	if err := r.conn.QueryRow(context.Background(), fmt.Sprintf(q, r.db), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// One row of every swept table at each age; a sweep keeps those within
// their table's period and drops the others, whole partitions at a time.
func TestSweepDropsWhatIsPastRetention(t *testing.T) {
	r := newRig(t)
	now := time.Now()
	ns := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	sec := func(ago time.Duration) int64 { return now.Add(-ago).Unix() }
	d := retention.Day
	// Ages chosen away from partition edges: a month partition of a day
	// 130 days ago ended at least 99 days ago; one of 10 days ago has not.
	for _, ago := range []time.Duration{130 * d, 10 * d} {
		r.exec(t, "INSERT INTO %s.input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) SELECT 'e', 'i', ?, ?, 's', 'i', ?, '1'",
			ns(ago), ns(ago), fmt.Sprint(ago))
		r.exec(t, "INSERT INTO %s.device_messages (serial, ts_ns, event_id, payload, outcome) SELECT 's', ?, ?, '{}', 'ok'", ns(ago), fmt.Sprint(ago))
	}
	for _, ago := range []time.Duration{2 * retention.Year, 100 * d} {
		r.exec(t, "INSERT INTO %s.input_minutes (entity, input, bucket, readings, version) SELECT 'e', 'i', ?, 1, 1", sec(ago))
	}
	for _, ago := range []time.Duration{12 * retention.Year, 2 * retention.Year} {
		r.exec(t, "INSERT INTO %s.input_hours (entity, input, bucket, readings, version) SELECT 'e', 'i', ?, 1, 1", sec(ago))
	}
	for _, ago := range []time.Duration{40 * d, 3 * d} {
		r.exec(t, "INSERT INTO %s.device_stats (serial, minute, kind, requests, readings) SELECT 's', ?, 'stored', 1, 1", sec(ago))
		r.exec(t, "INSERT INTO %s.device_rejections (serial, ts_ns, kind, message, error, source) SELECT 's', ?, 'k', 'm', 'e', 'a'", ns(ago))
		r.exec(t, "INSERT INTO %s.device_keys (serial, key, ts_ns, count, value) SELECT 's', 'k', ?, 1, '1'", ns(ago))
		r.exec(t, "INSERT INTO %s.device_seen (serial, last_ns, kind) SELECT ?, ?, 'stored'", fmt.Sprint(ago), ns(ago))
		r.exec(t, "INSERT INTO %s.rollup_dirty (marked_ns, entity, input, minute) SELECT ?, 'e', 'i', 0", ns(ago))
	}
	for _, ago := range []time.Duration{3 * d, time.Hour} {
		r.exec(t, "INSERT INTO %s.event_keys (event_id, ts_ns, outcome) SELECT ?, ?, 0", fmt.Sprint(ago), ns(ago))
	}
	// device_stats_hourly's months: one that ended 60 days ago at least.
	for _, ago := range []time.Duration{100 * d, 0} {
		r.exec(t, "INSERT INTO %s.device_stats_hourly (serial, hour, kind, requests, readings) SELECT 's', ?, 'stored', 1, 1", sec(ago))
	}

	j := New(r.store, retention.Defaults(), 24*time.Hour, nil, zap.NewNop())
	// Before the rollup has run, no reading is dropped: its first run
	// rolls up every one kept.
	if _, err := j.Sweep(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	if n := r.count(t, "SELECT count() FROM %s.input_values"); n != 2 {
		t.Fatalf("%d readings left by a sweep before the first rollup, want both", n)
	}
	r.store.SetRolledUp(now.UnixNano())
	dropped, err := j.Sweep(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	// One old partition of each of the ten tables (the first sweep took
	// those of eight), and rollup_dirty's 3-day-old one (it keeps two days).
	if dropped != 3 {
		t.Errorf("dropped %d partitions, want 3", dropped)
	}
	for _, c := range []struct {
		table, where string
		want         uint64
	}{
		{"input_values", "", 1}, {"input_values", fmt.Sprintf("event_id = '%s'", 10*d), 1},
		{"device_messages", "", 1}, {"input_minutes", "", 1}, {"input_hours", "", 1},
		{"device_stats", "", 1}, {"device_rejections", "", 1}, {"device_keys", "", 1}, {"rollup_dirty", "", 0},
		{"event_keys", fmt.Sprintf("event_id = '%s'", time.Hour), 1}, {"event_keys", "", 1},
		{"device_stats_hourly", "", 1},
	} {
		q := "SELECT count() FROM %s." + c.table
		if c.where != "" {
			q += " WHERE " + c.where
		}
		if n := r.count(t, q); n != c.want {
			t.Errorf("%s: %d rows left, want %d", q, n, c.want)
		}
	}
	// device_seen's delete is a mutation: it is done in the background.
	deadline := time.Now().Add(20 * time.Second)
	for r.count(t, "SELECT count() FROM %s.device_seen") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("device_seen holds %d rows after the sweep, want the recent one", r.count(t, "SELECT count() FROM %s.device_seen"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A second sweep finds nothing more.
	if dropped, err := j.Sweep(context.Background(), now); err != nil || dropped != 0 {
		t.Fatalf("second sweep dropped %d, %v", dropped, err)
	}
}

// Writing for longer than the retention, a month of readings at a time
// while the clock moves on, the table holds at most the periods' worth of
// months (plus the one being written): its disk stays flat.
func TestRetentionKeepsTheDiskFlat(t *testing.T) {
	r := newRig(t)
	periods := retention.Defaults()
	periods[retention.Readings] = 45 * retention.Day
	j := New(r.store, periods, 24*time.Hour, nil, zap.NewNop())
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const perMonth = 20000
	var peakRows, peakBytes, rows3, bytes3 uint64
	for m := range 12 {
		month := start.AddDate(0, m, 0)
		r.exec(t, "INSERT INTO %s.input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
			"SELECT 'e', 'i', ? + number * 60000000000, ? + number * 60000000000, 's', 'i', toString(number), toString(modulo(number, 100)) FROM system.numbers LIMIT ?",
			month.UnixNano(), month.UnixNano(), perMonth)
		now := month.AddDate(0, 0, 20) // the 21st, after the month's rows
		r.store.SetRolledUp(now.UnixNano())
		if _, err := j.Sweep(context.Background(), now); err != nil {
			t.Fatal(err)
		}
		rows := r.count(t, "SELECT count() FROM %s.input_values")
		bytes := r.count(t, "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '%s' AND table = 'input_values' AND active")
		// 45 days before the 21st is early in the month before: that
		// month and this one are kept.
		if m >= 1 && rows != 2*perMonth {
			t.Errorf("month %d: %d rows kept, want the last two months' %d", m, rows, 2*perMonth)
		}
		if m == 3 {
			rows3, bytes3 = rows, bytes
		}
		peakRows, peakBytes = max(peakRows, rows), max(peakBytes, bytes)
	}
	t.Logf("input_values after month 4: %d rows, %d bytes; peak over 12 months: %d rows, %d bytes", rows3, bytes3, peakRows, peakBytes)
	if peakRows != rows3 || float64(peakBytes) > 1.5*float64(bytes3) {
		t.Fatalf("disk grew: peak %d rows %d bytes, against %d rows %d bytes in month 4", peakRows, peakBytes, rows3, bytes3)
	}
}
