package mapping

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/reply"
	"github.com/devicehub/eventservice/pkg/resolve"
	"github.com/devicehub/eventservice/pkg/settle"
)

var errExhausted = errors.New("delivered more often than MAX_DELIVER without being settled")

// staleRetries is how many times an event is put back while the registry
// copy lags, StaleWait/staleRetries apart, before it is resolved anyway.
const staleRetries = 20

// Worker consumes accepted events, maps them and publishes them onward, all
// that arrived together in one envelope message.
type Worker struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	cache  *registry.Cache
	settle *settle.Settler
	tally  *diag.Tally // nil: unmatched keys are not counted
	log    *zap.Logger
	// consuming is set once this copy pulls from its consumer.
	consuming atomic.Bool
	m         *workerMetrics
}

// NewWorker returns a worker; Run starts it. Its metrics go to reg (nil:
// not exported).
func NewWorker(cfg Config, nc *nats.Conn, js jetstream.JetStream, cache *registry.Cache, tally *diag.Tally, reg prometheus.Registerer, log *zap.Logger) *Worker {
	reg = metrics.Or(reg)
	limits := cfg.Limits
	limits.NotReadyDelay = cfg.StaleWait / staleRetries
	return &Worker{cfg: cfg, nc: nc, js: js, cache: cache, tally: tally, log: log, m: newWorkerMetrics(reg),
		settle: settle.New(js, cfg.Names, limits, metrics.Mapper, reg, log)}
}

// envelope is a published batch awaiting its stream ack.
type envelope struct {
	fut jetstream.PubAckFuture
	in  *settle.Msg // the events message it was made of
	// msg is what was published, its message id included, for a
	// re-publish when the stream's ack did not come.
	msg *nats.Msg
}

// Consuming reports whether this copy pulls from its consumer yet.
func (w *Worker) Consuming() bool { return w.consuming.Load() }

// Run consumes until ctx ends, then stops taking messages and finishes
// publishing and acking those it holds.
func (w *Worker) Run(ctx context.Context) error {
	queue := make(chan *envelope, 256)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		w.awaitAcks(queue)
	}()
	// A batch is whatever arrived while the last one was processed, up
	// to one envelope's worth of events messages.
	err := bus.ConsumeBatches(ctx, w.js, bus.Durable{
		Stream: w.cfg.Names.EventsStream, Name: w.cfg.Names.MapperConsumer, ConsumerConfig: w.cfg.Consumer,
		Consuming: func() { w.consuming.Store(true) },
	}, w.log, batcher.Config{MaxItems: w.cfg.EnvelopeMax}, func(b *batcher.Batch[jetstream.Msg], release func(time.Duration)) {
		w.process(b.Items, queue)
		release(0)
	})
	close(queue)
	<-settled
	return err
}

// process maps a batch of events messages and publishes them as envelopes.
// All events of one message go into one envelope, so that the message is
// settled once that envelope is stored. Keyed events travel in envelopes of
// their own (ingest-api never puts keyed and unkeyed events in one message).
// Events the mapper finishes itself (device gone, unreadable payload) it
// answers; the writer answers every event it is handed.
func (w *Worker) process(msgs []jetstream.Msg, queue chan<- *envelope) {
	var now reply.Replies
	var mapped []event.Mapped
	var devs []*registry.Entry
	for _, jm := range msgs {
		m := w.settle.Take(jm)
		if m.Exhausted() {
			// Its earlier deliveries were never settled: a poison message.
			m.Settle(settle.Exhausted, errExhausted)
			answerAll(&now, m.Data(), outcome.ProcessingFailed, "delivery limit reached")
			continue
		}
		evs, err := event.DecodeEvents(m.Data())
		if err != nil {
			m.Settle(settle.HandoffFailed, failure.AsPermanent(err))
			continue
		}
		m.SetKeyed(len(evs) > 0 && evs[0].Keyed) // a keyed message is one reading or one keyed backlog
		delivered := m.Delivered()
		var stale bool
		devs, stale = w.lookup(evs, devs[:0])
		if stale && delivered < staleRetries {
			// Accepted under a record this copy has not seen yet: give
			// the registry watch time to deliver it.
			m.Settle(settle.NotReady, nil)
			w.m.staleWaits.Inc()
			continue
		}
		replay := m.Replay()
		var unreadable []byte
		mapped = mapped[:0]
		for i := range evs {
			ev := &evs[i]
			mp, ok, err := w.resolve(ev, devs[i], &now)
			if err != nil {
				unreadable = event.AppendEvent(unreadable, ev)
				continue
			}
			if !ok {
				continue
			}
			mp.MaybeStored, mp.Replay = delivered > 1 || replay, replay
			mapped = append(mapped, mp)
		}
		// The unreadable events are kept for operators and the rest of the
		// message goes on, unless the letter failed: then it is retried whole.
		if unreadable != nil && m.DeadLetterPart(unreadable, failure.AsPermanent(resolve.ErrPayload)) != nil {
			continue
		}
		if len(mapped) == 0 {
			m.Settle(settle.Done, nil)
			continue
		}
		// One envelope per events message: a redelivered message maps to
		// the same events, so its envelope has the same message id and the
		// stream drops it as a duplicate. An envelope gathering several
		// messages would get another id when one of them came back alone,
		// and two writer copies could each store one copy. (ingest-api
		// already gathers concurrent events into one message.)
		w.publish(&envelope{in: m}, mapped, queue)
	}
	now.Send(w.nc, w.log)
}

// lookup appends to devs each event's device record from this copy of the
// registry (nil: none), and reports whether any event was accepted under a
// record newer than this copy's, or one it does not have yet.
func (w *Worker) lookup(evs []event.Event, devs []*registry.Entry) (_ []*registry.Entry, stale bool) {
	for i := range evs {
		dev, _ := w.cache.Lookup(evs[i].Serial) // nil when absent
		stale = stale || dev == nil || dev.Rev < evs[i].Rev
		devs = append(devs, dev)
	}
	return devs, stale
}

// resolve maps one event with its device record (nil: none). An event whose
// device is gone is answered through now and reported not ok; one whose
// payload cannot be read is answered and returned as an error.
func (w *Worker) resolve(ev *event.Event, dev *registry.Entry, now *reply.Replies) (event.Mapped, bool, error) {
	if dev == nil {
		w.m.events.WithLabelValues(outcome.DeviceNotFound.String()).Inc()
		now.Add(ev.Reply, event.Reply{ID: ev.ID, Code: outcome.DeviceNotFound})
		return event.Mapped{}, false, nil
	}
	var unmatched func(string, []byte)
	if w.tally != nil {
		at := time.Unix(0, ev.ReceivedNs)
		unmatched = func(key string, value []byte) { w.tally.Key(ev.Serial, key, value, at) }
	}
	mp, err := resolve.Event(*ev, dev, unmatched)
	if errors.Is(err, resolve.ErrPayload) {
		w.m.events.WithLabelValues(outcome.ProcessingFailed.String()).Inc()
		now.Add(ev.Reply, event.Reply{ID: ev.ID, Code: outcome.ProcessingFailed, Detail: "unreadable event payload"})
		return event.Mapped{}, false, err
	}
	w.m.events.WithLabelValues(mp.Outcome.String()).Inc()
	mp.Keyed = ev.Keyed
	mp.Reply = ev.Reply
	return mp, true, nil
}
