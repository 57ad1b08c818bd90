// Package janitor enforces retention in ClickHouse: at start and every
// hour, each writer copy drops, on every server, the partitions of each
// table that end before now minus the table's period (RETENTION, the
// idempotency window for event_keys, as the first copy recorded them:
// periods.go). Copies sweeping at once drop a
// partition once; the others find it gone. Dropping a partition is
// instant and costs no merge, on ClickHouse 18.16 and current releases
// alike, so the tables' partitions are cut to fit their periods (months of
// readings, days of diagnostics).
package janitor

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// keys stands for event_keys' period, the idempotency window, and dirty
// for rollup_dirty's, a fixed two days: its marks are read within seconds.
const (
	keys  retention.Kind = "idempotency"
	dirty retention.Kind = "dirty"
)

// Tables is what is dropped when: each table and the kind whose period it
// keeps. device_seen has no time partitions: its rows are deleted instead.
var Tables = []struct {
	Table string
	Kind  retention.Kind
}{
	{"input_values", retention.Readings},
	{"input_minutes", retention.Minutes},
	{"input_hours", retention.Hours},
	{"device_messages", retention.Messages},
	{"event_keys", keys},
	{"device_stats", retention.Diagnostics},
	{"device_stats_hourly", retention.Diagnostics},
	{"device_rejections", retention.Diagnostics},
	{"device_keys", retention.Diagnostics},
	{"rollup_dirty", dirty},
}

// Interval is the time between sweeps; Timeout bounds one.
const (
	Interval = time.Hour
	Timeout  = 5 * time.Minute
)

// Janitor sweeps one store.
type Janitor struct {
	store   *chstore.Store
	periods retention.Periods
	log     *zap.Logger
	dropped *prometheus.CounterVec // partitions, by table
	failed  prometheus.Counter
	settled bool // periods holds the recorded ones (settle)
}

// New returns a Janitor for a copy configured with periods, and keyWindow
// of event_keys; it keeps those recorded (settle), the first copy's.
func New(store *chstore.Store, periods retention.Periods, keyWindow time.Duration, reg prometheus.Registerer, log *zap.Logger) *Janitor {
	p := retention.Periods{keys: keyWindow, dirty: 2 * retention.Day}
	for k, d := range periods {
		p[k] = d
	}
	j := &Janitor{store: store, periods: p, log: log,
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "retention_dropped_partitions_total",
			Help: "Partitions dropped for being past their retention, by table.",
		}, []string{"table"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "retention_sweep_failures_total",
			Help: "Retention sweeps that failed (retried at the next sweep).",
		}),
	}
	metrics.Or(reg).MustRegister(j.dropped, j.failed)
	for _, t := range Tables {
		j.dropped.WithLabelValues(t.Table)
	}
	return j
}

// Run sweeps once the rollup's progress is known (within a minute of the
// start), then every Interval until ctx ends.
func (j *Janitor) Run(ctx context.Context) error {
	for wait := time.Now().Add(time.Minute); j.store.RolledUp() == 0 && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, Timeout)
		_, err := j.Sweep(sctx, time.Now())
		cancel()
		if err != nil && ctx.Err() == nil {
			j.failed.Inc()
			j.log.Warn("retention sweep failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep drops what is past its period at now on every server, and returns
// the partitions it dropped; a table that fails does not stop the others.
func (j *Janitor) Sweep(ctx context.Context, now time.Time) (int, error) {
	if err := j.settle(ctx); err != nil {
		return 0, err
	}
	total := 0
	rolled := time.Unix(0, j.store.RolledUp())
	err := j.store.OnEachServer(ctx, func(st *chstore.Store, suffix string) error {
		var errs []error
		for _, t := range Tables {
			cutoff := now.Add(-j.periods[t.Kind])
			switch {
			case j.store.RolledUp() == 0 && (t.Table == "input_values" || t.Table == "rollup_dirty"):
				// Not before the rollup has run (a deployment's first
				// rollup computes the tiers from every reading kept), nor
				// marks it has not done.
				continue
			case t.Table == "rollup_dirty":
				cutoff = minTime(cutoff, rolled.Add(-retention.Day))
			}
			n, err := st.DropPartitionsBefore(ctx, t.Table+suffix, cutoff)
			errs = append(errs, err)
			if n > 0 {
				total += n
				j.dropped.WithLabelValues(t.Table).Add(float64(n))
				j.log.Info("dropped partitions past retention", zap.String("table", t.Table), zap.Int("partitions", n))
			}
		}
		_, err := st.DeleteSeenBefore(ctx, "device_seen"+suffix, now.Add(-j.periods[retention.Diagnostics]).UnixNano())
		return errors.Join(append(errs, err)...)
	})
	return total, err
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
