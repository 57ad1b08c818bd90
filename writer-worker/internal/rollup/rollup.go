// Package rollup keeps the minute and hour rollups (chstore.Tiers) up to
// date. The writer marks each minute of an entity input it stores readings
// in (rollup_dirty, with the raw messages, before the envelope is acked: a
// redelivery marks again); one writer-worker copy at a time, holding the
// lease "rollup", reads the marks in order every Interval and computes the
// marked minutes and their hours again, whole, from the readings. Its
// progress (the time of the last mark done) is the lease's DoneNs: every
// copy reads it, and its series read the rollups only before it.
//
// Computing a bucket again from the readings, instead of adding each
// insert's share to it (a materialized view), is what keeps a duplicate
// that ReplacingMergeTree has not folded yet, a replay or a backfill from
// counting twice; and it adds two small inserts a second to live ingestion
// instead of one per tier per insert (docs/sizing.md has the measurements).
package rollup

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Fixed: how often the rollup runs (a minute: each live minute is computed
// about twice; every 10 s cost 38% more ClickHouse CPU at 5,000 readings/s,
// every minute 3%), how old a mark must be before it is read (a mark is
// written within INSERT_TIMEOUT of its time, and clocks of writer copies
// differ by a little), the span of marks one query computes (at 5,000
// readings/s, 300,000 marks at most), how long a holder that stopped keeps
// the lease, and one step's time.
const (
	Interval = time.Minute
	Lag      = chstore.RollupLag
	StepSpan = time.Minute
	leaseTTL = 3 * time.Minute
	stepTime = 2 * time.Minute
)

// Runner is one copy's share of the rollup.
type Runner struct {
	leases   *backfill.Store
	store    *chstore.Store
	readings time.Duration // RETENTION's readings period
	started  time.Time
	owner    string
	log      *zap.Logger
	steps    prometheus.Counter
	behind   prometheus.Gauge
}

// New returns a Runner.
// readings is how long readings are kept: minutes in months past it are
// not computed again.
func New(leases *backfill.Store, store *chstore.Store, readings time.Duration, reg prometheus.Registerer, log *zap.Logger) *Runner {
	r := &Runner{leases: leases, store: store, readings: readings, started: time.Now(), owner: nuid.Next(), log: log,
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "rollup_steps_total",
			Help: "Spans of marks (up to a minute of them) this copy rolled up.",
		}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Writer, Name: "rollup_behind_seconds",
			Help: "How far the rollups are behind now (the newest mark done; before the first rollup, since this copy started), as this copy last saw them.",
		}),
	}
	metrics.Or(reg).MustRegister(r.steps, r.behind)
	return r
}

// Run takes part until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	defer r.leases.Release(context.WithoutCancel(ctx), backfill.LeaseRollup, r.owner)
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		if err := r.Step(ctx, time.Now()); err != nil && ctx.Err() == nil {
			r.log.Warn("rollup step failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step takes or renews the lease and, holding it, computes the marks up to
// now-Lag (StepSpan at a time); either way it tells the store where the
// rollups end.
func (r *Runner) Step(ctx context.Context, now time.Time) error {
	l, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, now, leaseTTL, 0)
	if err != nil {
		return err
	}
	done := l.DoneNs
	defer func() {
		r.store.SetRolledUp(done)
		since := r.started
		if done > 0 {
			since = time.Unix(0, done)
		}
		r.behind.Set(time.Since(since).Seconds())
	}()
	if !held {
		return nil
	}
	hi := now.Add(-Lag).UnixNano()
	if done == 0 {
		// The first step of a deployment: the readings stored before
		// marks were made (an upgrade, a restore) are rolled up whole,
		// however long that takes, the lease renewed after each day.
		renew := func() error {
			_, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, time.Now(), leaseTTL, 0)
			if err == nil && !held {
				err = errors.New("the rollup lease was taken over")
			}
			return err
		}
		if err := r.store.RollupAll(ctx, now.UnixNano(), renew); err != nil {
			return err
		}
		done = hi
		_, _, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, time.Now(), leaseTTL, done)
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, stepTime)
	defer cancel()
	// The first minute whose readings' month is kept.
	cutoff := now.Add(-r.readings).UTC()
	since := time.Date(cutoff.Year(), cutoff.Month(), 1, 0, 0, 0, 0, time.UTC).Unix()
	for done < hi {
		upTo := min(hi, done+int64(StepSpan))
		if err := r.store.Rollup(ctx, done, upTo, since, time.Now().UnixNano()); err != nil {
			return err
		}
		if _, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, time.Now(), leaseTTL, upTo); err != nil || !held {
			return err
		}
		r.steps.Inc()
		done = upTo
	}
	return nil
}
