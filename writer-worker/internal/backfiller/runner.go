// Package backfiller runs backfill jobs (pkg/backfill): a device's kept raw
// messages read in receive order, page by page, mapped with the job's
// snapshot of the mapping (pkg/resolve, as mapper-worker maps), and the
// values not yet stored inserted in reading time. One writer-worker copy at
// a time runs jobs, one job at a time, holding the bucket's lease.
package backfiller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/retry"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

const (
	// poll is how often a copy that knows of unfinished jobs tries the
	// lease.
	poll = 2 * time.Second
	// leaseTTL is how long a runner that stopped renewing keeps the lease:
	// longer than a page may take (pageTimeout), so a copy that stalls in
	// an insert has given up before another takes over.
	leaseTTL    = 2 * time.Minute
	pageTimeout = 30 * time.Second
	// pageMessages is how many raw messages a page holds, about (at most
	// twice as many; one insert of their values), and pageBytes the most
	// payload bytes it holds.
	pageMessages = 5000
	pageBytes    = 8 << 20
	// maxWindow is the widest window of receive time a page reads: an
	// empty stretch of a range costs one page a month.
	maxWindow = float64(31 * 24 * time.Hour)
	// settle is how old a raw message must be before a job reads it: the
	// raw log is written within a second of the values, so by then every
	// message the pipeline handled under the old mapping is in it.
	settle = 10 * time.Second
	// duty is the share of time a runner spends on pages: after a page
	// that took d it waits d×(1-duty)/duty, leaving ClickHouse to live
	// ingestion.
	duty = 0.5
	// While live ingestion runs (this copy stored more than liveThreshold a
	// second since the last page), a backfill stores at most busyRate
	// readings a second: ~10 us of CPU each (docs/performance.md,
	// "Backfill"), a fifth of a core.
	liveThreshold = 10
	busyRate      = 25_000
	// A job whose pages have failed for failFor in a row (each retry in a
	// window a quarter of the last) fails with the last error, and the one
	// runner moves on to the next job: longer than a ClickHouse restart.
	failFor = 10 * time.Minute
)

// Runner runs jobs while it holds the lease.
type Runner struct {
	jobs     *backfill.Store
	store    *chstore.Store
	live     func() uint64 // live events stored by this copy so far
	owner    string
	log      *zap.Logger
	readings *prometheus.CounterVec
	running  prometheus.Gauge
}

// New returns a runner; Run starts it. live counts the events this copy's
// live ingestion has stored (nil: none). Its metrics go to reg (nil: not
// exported).
func New(jobs *backfill.Store, store *chstore.Store, live func() uint64, reg prometheus.Registerer, log *zap.Logger) *Runner {
	if live == nil {
		live = func() uint64 { return 0 }
	}
	r := &Runner{jobs: jobs, store: store, live: live, owner: nuid.Next(), log: log,
		readings: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Writer, Name: "backfill_readings_total",
			Help: "Readings backfills found in raw messages: stored, or skipped as already stored."}, []string{"result"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Writer, Name: "backfill_running",
			Help: "1 while this copy runs a backfill (one copy at a time does)."}),
	}
	r.readings.WithLabelValues("stored")
	r.readings.WithLabelValues("skipped")
	metrics.Or(reg).MustRegister(r.readings, r.running)
	return r
}

// Run follows the jobs and, while any is unfinished, takes the lease
// whenever it is free and runs them, oldest first, until ctx ends; then it
// gives the lease up, so that another copy resumes a job at once.
func (r *Runner) Run(ctx context.Context) error {
	var open atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	wg.Go(func() { followed <- r.jobs.Follow(ctx, func(n int) { open.Store(int64(n)) }) })
	defer r.jobs.Release(context.WithoutCancel(ctx), backfill.LeaseRunner, r.owner)
	for {
		if open.Load() > 0 {
			if err := r.runQueued(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("backfills", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-followed:
			return err
		case <-time.After(poll):
		}
	}
}

// errLeaseLost ends a job's run when another copy holds the lease.
var errLeaseLost = errors.New("backfill lease held by another copy")

// runQueued runs unfinished jobs while this copy holds the lease.
func (r *Runner) runQueued(ctx context.Context) error {
	for ctx.Err() == nil {
		if _, held, err := r.jobs.TakeLease(ctx, backfill.LeaseRunner, r.owner, time.Now(), leaseTTL, 0); err != nil || !held {
			return err
		}
		all, err := r.jobs.All(ctx)
		if err != nil {
			return err
		}
		var next *backfill.Job
		for i := range all {
			if !all[i].Finished() {
				next = &all[i]
				break
			}
		}
		if next == nil {
			r.jobs.Release(ctx, backfill.LeaseRunner, r.owner)
			return nil
		}
		if err := r.run(ctx, *next); err != nil {
			return err
		}
	}
	return nil
}

// run runs job j until it is finished, ctx ends or the lease is lost.
func (r *Runner) run(ctx context.Context, j backfill.Job) error {
	log := r.log.With(zap.String("backfill", j.ID))
	j, err := r.jobs.Update(ctx, j.Serial, j.ID, func(j *backfill.Job) error {
		if j.Finished() {
			return errFinished
		}
		if j.CancelRequested {
			finish(j, backfill.Cancelled, "")
			return nil
		}
		if j.State == backfill.Queued {
			j.State, j.StartedNs = backfill.Running, time.Now().UnixNano()
		}
		return nil
	})
	if err != nil || j.Finished() {
		return ignoreFinished(err)
	}
	log.Info("backfill running", zap.Int64("from_ns", j.FromNs), zap.Int64("to_ns", j.ToNs), zap.Int64("cursor_ns", j.CursorNs))
	r.running.Set(1)
	defer r.running.Set(0)
	p := newPager(j, r.store)
	failing, failingSince := 0, time.Time{}
	for {
		if _, held, err := r.jobs.TakeLease(ctx, backfill.LeaseRunner, r.owner, time.Now(), leaseTTL, 0); err != nil || !held {
			return cmp.Or(err, errLeaseLost)
		}
		start, liveBefore := time.Now(), r.live()
		upto := min(j.ToNs, start.Add(-settle).UnixNano())
		pctx, cancel := context.WithTimeout(ctx, pageTimeout)
		done, counts, err := p.next(pctx, upto)
		cancel()
		r.readings.WithLabelValues("stored").Add(float64(counts.Readings))
		r.readings.WithLabelValues("skipped").Add(float64(counts.Skipped))
		if ctx.Err() != nil {
			return nil
		}
		state, errText := "", ""
		switch {
		case err != nil && failure.KindOf(err) == failure.Permanent:
			state, errText = backfill.Failed, err.Error()
		case err != nil && failing > 0 && time.Since(failingSince) >= failFor:
			state, errText = backfill.Failed, err.Error()
		case err != nil:
			if failing == 0 {
				failingSince = start
			}
			failing++
			errText = err.Error()
			p.windowNs = max(1, p.windowNs/4)
			log.Warn("backfill page failed, retrying", zap.Int("failures", failing), zap.Error(err))
		case done && upto >= j.ToNs:
			state = backfill.Done
		}
		if err == nil {
			failing = 0
		}
		j, err = r.jobs.Update(ctx, j.Serial, j.ID, func(job *backfill.Job) error {
			job.Counts.Add(counts)
			job.CursorNs, job.CursorID, job.Error = p.cursorNs, p.cursorID, errText
			switch {
			case state != "":
				finish(job, state, errText)
			case job.CancelRequested:
				finish(job, backfill.Cancelled, "")
			}
			return nil
		})
		if err != nil {
			// The page is stored; a later run finds its values and skips them.
			return fmt.Errorf("record backfill progress: %w", err)
		}
		if j.Finished() {
			log.Info("backfill finished", zap.String("state", j.State), zap.Int64("messages", j.Messages),
				zap.Int64("readings", j.Readings), zap.Int64("skipped", j.Skipped))
			return nil
		}
		wait := pause(time.Since(start), counts.Readings, r.live()-liveBefore)
		switch {
		case failing > 0:
			wait = pageRetry.Delay(failing)
		case done:
			wait = max(wait, time.Second) // waiting for the range's last messages to settle
		}
		if !retry.Sleep(ctx, wait) {
			return nil
		}
	}
}

// pageRetry is the pause after a page that failed: up to 1 s after the
// first failure, growing to 10 s (the job fails after failFor).
var pageRetry = retry.Backoff{Initial: time.Second, Max: 10 * time.Second}

// pause is the wait after a page that took took and stored readings
// while live ingestion stored live events.
func pause(took time.Duration, readings int64, live uint64) time.Duration {
	wait := time.Duration(float64(took) * (1 - duty) / duty)
	if float64(live) > liveThreshold*took.Seconds() {
		wait = max(wait, time.Duration(float64(readings)/busyRate*float64(time.Second))-took)
	}
	return wait
}

// errFinished: the job was finished (cancelled) before it ran.
var errFinished = errors.New("finished")

func ignoreFinished(err error) error {
	if errors.Is(err, errFinished) {
		return nil
	}
	return err
}

func finish(j *backfill.Job, state, errText string) {
	j.State, j.FinishedNs, j.Error = state, time.Now().UnixNano(), errText
}
