package janitor

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/devicehub/eventservice/pkg/retention"
)

// aged puts a reading 40 days old (its month ended at least 9 days ago)
// and an idempotency record 30 hours old (its day ended at least 6 hours
// ago) into r's tables.
func aged(t *testing.T, r rig, now time.Time) {
	t.Helper()
	ns := now.Add(-40 * retention.Day).UnixNano()
	r.exec(t, "INSERT INTO %s.input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) SELECT 'e', 'i', ?, ?, 's', 'i', 'old', '1'", ns, ns)
	r.exec(t, "INSERT INTO %s.event_keys (event_id, ts_ns, outcome) SELECT 'old', ?, 0", now.Add(-30*time.Hour).UnixNano())
}

// A copy started with shorter periods than the first copy's (readings
// kept a day, IDEMPOTENCY_WINDOW of an hour) sweeps with the first copy's:
// it leaves the older reading and idempotency record in place, and logs,
// once, each period that differs.
func TestACopyWithShorterRetentionKeepsTheRecordedPeriods(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	now := time.Now()
	r.store.SetRolledUp(now.UnixNano())
	first := New(r.store, retention.Defaults(), 72*time.Hour, nil, zap.NewNop())
	if _, err := first.Sweep(ctx, now); err != nil {
		t.Fatal(err)
	}
	aged(t, r, now)

	short := retention.Defaults()
	short[retention.Readings] = retention.Day
	core, logs := observer.New(zap.WarnLevel)
	second := New(r.store, short, time.Hour, nil, zap.New(core))
	for range 2 {
		if _, err := second.Sweep(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"input_values", "event_keys"} {
		if n := r.count(t, "SELECT count() FROM %s."+table+" WHERE event_id = 'old'"); n != 1 {
			t.Errorf("%s: %d rows of the older one left by a copy with shorter periods, want 1 (the first copy's periods keep it)", table, n)
		}
	}
	var got []string
	for _, e := range logs.All() {
		f := e.ContextMap()
		got = append(got, fmt.Sprintf("%s: %v recorded %v", f["kind"], f["configured"], f["recorded"]))
	}
	want := []string{"readings: 1d recorded 90d", "idempotency: 1h0m0s recorded 3d"}
	if !slices.Equal(got, want) {
		t.Errorf("warnings over two sweeps: %q, want %q (one per differing period, once per start)", got, want)
	}
}

// An operator shortens a period with Set: every copy, the first included,
// sweeps with it from its next start.
func TestOperatorSetsRetention(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	now := time.Now()
	r.store.SetRolledUp(now.UnixNano())
	first := New(r.store, retention.Defaults(), 72*time.Hour, nil, zap.NewNop())
	if _, err := first.Sweep(ctx, now); err != nil {
		t.Fatal(err)
	}
	aged(t, r, now)
	for _, bad := range []string{"", "keys=1h", "readings=10m", "minutes=1d", "readings=soon"} {
		if _, err := Set(ctx, r.store, bad, now); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
	got, err := Set(ctx, r.store, "readings=1d, idempotency=1h", now)
	if err != nil {
		t.Fatal(err)
	}
	if got["readings"] != retention.Day || got["idempotency"] != time.Hour || got["minutes"] != retention.Year {
		t.Fatalf("recorded after Set: %v", got)
	}
	again := New(r.store, retention.Defaults(), 72*time.Hour, nil, zap.NewNop())
	if _, err := again.Sweep(ctx, now); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"input_values", "event_keys"} {
		if n := r.count(t, "SELECT count() FROM %s."+table+" WHERE event_id = 'old'"); n != 0 {
			t.Errorf("%s: %d rows of the older one left after the operator shortened its period, want 0", table, n)
		}
	}
}
