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
// differ by a little), the span of marked time one window covers (at 5,000
// readings/s, 300,000 marks at most), how long a holder that stopped keeps
// the lease, and one query's time.
const (
	Interval  = time.Minute
	Lag       = chstore.RollupLag
	StepSpan  = time.Minute
	leaseTTL  = 3 * time.Minute
	queryTime = 2 * time.Minute
)

// Budget bounds one rollup query: the distinct minutes it computes, and
// the rows it may read from input_values or input_minutes (as ClickHouse
// estimates them from the primary key before reading: a query over it
// fails at once, and is split).
type Budget struct {
	Minutes int
	Rows    uint64
}

// DefaultBudget: 50,000 minutes are a window of live marks from 25,000
// inputs or more (their current and previous minute) in one query, and a
// backlog of one input at a reading a second in chunks of 3 M readings
// (about 400 MB of ClickHouse memory; a year of them needed 3.83 GiB in one
// query). 500 M rows is above what a live step reads at 50,000 inputs over
// month-sized parts (docs/sizing.md): it stops a chunk whose span of
// minutes would scan far more than that.
var DefaultBudget = Budget{Minutes: 50_000, Rows: 500_000_000}

// Runner is one copy's share of the rollup.
type Runner struct {
	leases   *backfill.Store
	store    *chstore.Store
	readings time.Duration // RETENTION's readings period
	budget   Budget
	started  time.Time
	owner    string
	log      *zap.Logger
	steps    prometheus.Counter
	minutes  prometheus.Counter
	splits   prometheus.Counter
	behind   prometheus.Gauge

	// size is the distinct minutes the next query computes: halved when a
	// query does not fit, doubled back after each that does.
	size int
	// cur is how far this copy got within a window (cur.InNs set), valid
	// while the lease's DoneNs is cur.DoneNs; another copy taking over
	// does the window again.
	cur chstore.Cursor
}

// New returns a Runner.
// readings is how long readings are kept: minutes in months past it are
// not computed again. budget bounds each query.
func New(leases *backfill.Store, store *chstore.Store, readings time.Duration, budget Budget, reg prometheus.Registerer, log *zap.Logger) *Runner {
	r := &Runner{leases: leases, store: store, readings: readings, budget: budget, size: budget.Minutes, started: time.Now(), owner: nuid.Next(), log: log,
		steps: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "rollup_steps_total",
			Help: "Spans of marks (up to a minute of them) this copy rolled up.",
		}),
		minutes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "rollup_minutes_total",
			Help: "Marked minutes of entity inputs this copy computed again.",
		}),
		splits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "rollup_splits_total",
			Help: "Rollup queries that did not fit (rows, memory or time) and were split in two.",
		}),
		behind: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metrics.Writer, Name: "rollup_behind_seconds",
			Help: "How far the rollups are behind now (the newest mark done; before the first rollup, since this copy started), as this copy last saw them.",
		}),
	}
	metrics.Or(reg).MustRegister(r.steps, r.minutes, r.splits, r.behind)
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
// now-Lag, oldest first, a chunk of at most the budget per query; either
// way it tells the store where the rollups end.
func (r *Runner) Step(ctx context.Context, now time.Time) error {
	l, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, now, leaseTTL, 0)
	if err != nil {
		return err
	}
	r.progress(l.DoneNs)
	if !held {
		return nil
	}
	hi := now.Add(-Lag).UnixNano()
	if l.DoneNs == 0 {
		return r.first(ctx, now, hi)
	}
	// The first minute whose readings' month is kept.
	cutoff := now.Add(-r.readings).UTC()
	since := time.Date(cutoff.Year(), cutoff.Month(), 1, 0, 0, 0, 0, time.UTC).Unix()
	cur := chstore.Cursor{DoneNs: l.DoneNs}
	if r.cur.DoneNs == l.DoneNs {
		cur = r.cur
	}
	for cur.DoneNs < hi {
		next, err := r.chunk(ctx, cur, hi, since)
		if err != nil {
			return err
		}
		renew := int64(0)
		if next.DoneNs != cur.DoneNs {
			renew = next.DoneNs
		}
		if _, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, time.Now(), leaseTTL, renew); err != nil || !held {
			return err
		}
		cur, r.cur = next, next
		if renew != 0 {
			r.steps.Inc()
			r.progress(renew)
		}
	}
	return nil
}

// chunk computes the next chunk after cur and returns the cursor after it;
// a chunk that does not fit is not done, and the next is half its size.
func (r *Runner) chunk(ctx context.Context, cur chstore.Cursor, hi, since int64) (chstore.Cursor, error) {
	c, err := r.store.NextChunk(ctx, cur, hi, int64(StepSpan), since, r.size)
	if err != nil || c.Minutes == 0 {
		return c.Next(), err
	}
	rows := r.budget.Rows
	if c.Minutes == 1 {
		rows = 0 // nothing left to split: one minute is done whatever it reads
	}
	qctx, cancel := context.WithTimeout(ctx, queryTime)
	err = r.store.RollupChunk(qctx, c, since, time.Now().UnixNano(), rows)
	cancel()
	if err != nil {
		if chstore.TooBig(err) && ctx.Err() == nil && c.Minutes > 1 {
			r.size = c.Minutes / 2
			r.splits.Inc()
			r.log.Info("rollup query did not fit: split", zap.Int("minutes", c.Minutes), zap.Error(err))
			return cur, nil
		}
		return cur, err
	}
	r.size = min(r.budget.Minutes, 2*r.size)
	r.minutes.Add(float64(c.Minutes))
	return c.Next(), nil
}

// first is the first step of a deployment: the readings stored before
// marks were made (an upgrade, a restore) are rolled up whole, however
// long that takes, the lease renewed after each day.
func (r *Runner) first(ctx context.Context, now time.Time, hi int64) error {
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
	if _, held, err := r.leases.TakeLease(ctx, backfill.LeaseRollup, r.owner, time.Now(), leaseTTL, hi); err != nil || !held {
		return err
	}
	r.progress(hi)
	return nil
}

// progress tells the store and the gauge where the rollups end.
func (r *Runner) progress(done int64) {
	r.store.SetRolledUp(done)
	since := r.started
	if done > 0 {
		since = time.Unix(0, done)
	}
	r.behind.Set(time.Since(since).Seconds())
}
