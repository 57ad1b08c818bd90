// Package submit is ingest-api's one way into the pipeline. Submit takes an
// accepted request's events (one reading, or a backlog's), publishes them
// into the events stream in a message shared with the events of concurrent
// requests (a keyed request after taking its one claim: see
// ingest-api/internal/claim), and waits for each event's outcome from the
// workers. A keyed request whose claim an earlier attempt holds does not
// enter the pipeline: its events get that attempt's outcomes. Every failure
// comes back the one way, as a Failure.
package submit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/reply"
)

// Failure is why a submission has no outcome per event: the answer to give
// the request instead.
type Failure struct {
	Code   outcome.Code
	Detail string
}

func (f *Failure) Error() string { return f.Detail }

// The details of the failures Submit reports.
const (
	timedOut       = "timed out waiting for the storage outcome"
	earlierTimeout = "timed out waiting for the outcome of an earlier attempt with this Idempotency-Key"
	notAccepted    = "event not accepted: "
	earlierUnread  = "storage error: outcome of an earlier attempt not readable"
)

// earlierPoll is how often the outcomes of an earlier attempt's events are
// asked for while that attempt is still on its way.
const earlierPoll = 100 * time.Millisecond

// Outcomes asks the writers for the recorded outcomes of ids (events an
// earlier attempt put in the pipeline). An error comes with the outcome to
// answer: ProcessingFailed when no writer could be asked, StorageFailed when
// one could not read ClickHouse.
type Outcomes func(ctx context.Context, ids []string) (map[string]outcome.Code, outcome.Code, error)

// Config is what a Submitter needs besides its connections.
type Config struct {
	Subject string // the events stream's subject
	// MaxBytes bounds a message's events, counted by event.EnvelopeCost as
	// the mapper counts them, so that a message always fits in one
	// envelope.
	MaxBytes       int
	OutcomeTimeout time.Duration
	// ClaimFirst publishes a keyed message's events only once its claims
	// are decided, as the release before did; else they go with their
	// claims, and the writers decide (needs every mapper-worker and
	// writer-worker of this release).
	ClaimFirst bool
}

// Submitter submits; Run publishes.
type Submitter struct {
	cfg      Config
	pub      *publisher
	waiter   *reply.Waiter
	outcomes Outcomes
	wait     prometheus.Histogram
	errs     prometheus.Counter
	full     prometheus.Counter // of errs: for want of storage
}

// New returns a Submitter publishing with js, claiming in claims, hearing
// outcomes on waiter, asking earlier outcomes of outcomes, its metrics in
// reg.
func New(cfg Config, js jetstream.JetStream, claims *claim.Claims, waiter *reply.Waiter, outcomes Outcomes,
	reg prometheus.Registerer, log *zap.Logger) *Submitter {
	sizes := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Ingest, Name: "publish_batch_events",
		Help:    "Events per JetStream message (the events of concurrent requests share one; keyed and unkeyed ones fill messages of their own).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9),
	})
	s := &Submitter{cfg: cfg, waiter: waiter, outcomes: outcomes,
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Ingest, Name: "outcome_wait_seconds",
			Help:    "Time from submitting a request's events to their last outcome.",
			Buckets: metrics.LatencyBuckets,
		}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "publish_errors_total",
			Help: "Submissions JetStream did not accept (NATS down, stream full, timeout).",
		}),
	}
	s.full = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Ingest, Name: "stream_full_total",
		Help: "Submissions JetStream refused for want of storage: a stream at its NATS_STREAM_MAX_BYTES, the server's store limit, or its disk full (also in publish_errors_total).",
	})
	metrics.Or(reg).MustRegister(sizes, s.wait, s.errs, s.full)
	s.pub = newPublisher(cfg.Subject, defaultLimits(cfg.MaxBytes, cfg.OutcomeTimeout, cfg.ClaimFirst), js, claims, func(n int) { sizes.Observe(float64(n)) }, log)
	return s
}

// Run publishes until ctx ends; then it refuses new submissions, publishes
// what it holds, and returns once those messages are acked.
func (s *Submitter) Run(ctx context.Context) error { return s.pub.run(ctx) }

// Submit puts evs into the pipeline as one unit and returns each one's
// outcome, in order. claimID is "" for a request sent without an
// Idempotency-Key; for a keyed one (its events' ids derived from the key)
// it is the id derived from the key for the request as a whole, the one
// claim its attempts take. The error is a *Failure (the events are not
// known to be stored), or ctx's when the client went away.
func (s *Submitter) Submit(ctx context.Context, evs []*event.Event, claimID string) ([]event.Reply, error) {
	sub := newSubmission(evs, claimID)
	keyed := sub.keyed()
	if sub.cost()+512 > s.cfg.MaxBytes {
		return nil, &Failure{Code: outcome.PayloadTooLarge}
	}
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i], ev.Keyed = ev.ID, keyed
	}
	replies, cancel := s.waiter.RegisterAll(ids)
	defer cancel()
	start := time.Now()
	if err := s.pub.add(sub); err != nil {
		s.countRefusal(err)
		return nil, &Failure{Code: outcome.ProcessingFailed, Detail: notAccepted + err.Error()}
	}
	out, err := s.await(ctx, ids, replies, sub.refused)
	if err != nil {
		return nil, err
	}
	s.wait.Observe(time.Since(start).Seconds())
	return out, nil
}

// await collects the outcomes of ids, in order: from replies, and for the
// events an earlier attempt holds the claims of, from the writers' record,
// polled. The common case, one reading nobody else claimed, costs one timer
// and no map.
func (s *Submitter) await(ctx context.Context, ids []string, replies <-chan event.Reply, refused <-chan refusal) ([]event.Reply, error) {
	out := make([]event.Reply, len(ids))
	at := func(id string) int { return 0 }
	if len(ids) > 1 {
		pos := make(map[string]int, len(ids))
		for i, id := range ids {
			pos[id] = i
		}
		at = func(id string) int {
			if i, ok := pos[id]; ok {
				return i
			}
			return -1
		}
	}
	deadline := time.NewTimer(s.cfg.OutcomeTimeout)
	defer deadline.Stop()
	var earlier map[string]bool // events whose outcome an earlier attempt gives
	var poll <-chan time.Time
	var pollCtx context.Context
	for pending := len(ids); pending > 0; {
		select {
		case r := <-replies:
			if i := at(r.ID); i >= 0 && out[i].ID == "" {
				out[i], pending = r, pending-1
			}
		case rf := <-refused:
			if !errors.Is(rf.err, claim.ErrTaken) {
				s.countRefusal(rf.err)
				return nil, &Failure{Code: outcome.ProcessingFailed, Detail: notAccepted + rf.err.Error()}
			}
			if earlier == nil {
				earlier = make(map[string]bool, len(rf.ids))
				var cancel context.CancelFunc
				pollCtx, cancel = context.WithTimeout(ctx, s.cfg.OutcomeTimeout)
				defer cancel()
			}
			for _, id := range rf.ids {
				earlier[id] = true
			}
			poll = time.After(0)
		case <-poll:
			found, err := s.askEarlier(pollCtx, earlier, out, at)
			if err != nil {
				return nil, err
			}
			pending -= found
			poll = time.After(earlierPoll)
		case <-deadline.C:
			return nil, s.expired(context.DeadlineExceeded, earlier)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// askEarlier fills in out the recorded outcomes of the earlier events it
// lacks, and says how many it found.
func (s *Submitter) askEarlier(ctx context.Context, earlier map[string]bool, out []event.Reply, at func(string) int) (int, error) {
	var missing []string
	for id := range earlier {
		if i := at(id); i >= 0 && out[i].ID == "" {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return 0, nil
	}
	found, code, err := s.outcomes(ctx, missing)
	switch {
	case ctx.Err() != nil:
		return 0, s.expired(ctx.Err(), earlier)
	case err != nil:
		if code == outcome.ProcessingFailed && !errors.Is(err, nats.ErrNoResponders) {
			// The writer could not read ClickHouse (and logged why):
			// the device hears the condition, not ClickHouse's text.
			return 0, &Failure{Code: outcome.StorageFailed, Detail: earlierUnread}
		}
		return 0, &Failure{Code: code, Detail: err.Error()}
	}
	n := 0
	for id, c := range found {
		if i := at(id); earlier[id] && i >= 0 && out[i].ID == "" {
			out[i], n = event.Reply{ID: id, Code: c}, n+1
		}
	}
	return n, nil
}

// expired is the failure of a wait that ended (err: why): a timeout, or the
// client's context.
func (s *Submitter) expired(err error, earlier map[string]bool) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if len(earlier) > 0 {
		return &Failure{Code: outcome.ProcessingFailed, Detail: earlierTimeout}
	}
	return &Failure{Code: outcome.ProcessingFailed, Detail: timedOut}
}

// countRefusal counts a submission JetStream did not accept, and whether it
// was for want of storage.
func (s *Submitter) countRefusal(err error) {
	s.errs.Inc()
	msg := strings.ToLower(err.Error())
	for _, m := range []string{"maximum bytes", "maximum messages", "insufficient", "resources exceeded", "no space left", "storage"} {
		if strings.Contains(msg, m) {
			s.full.Inc()
			return
		}
	}
}
