package mapping

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Config tunes the mapper's consumer.
type Config struct {
	MaxAckPending int
	PullBatch     int
	AckWait       time.Duration
	// EnvelopeMax is the most events one envelope carries.
	EnvelopeMax int
	// Names are the streams and subjects (main sets them from the NATS
	// configuration).
	Names bus.Names
	// StaleWait is how long an event waits for this process's registry copy
	// to reach the revision the event was accepted under.
	StaleWait time.Duration
}

// staleRetries is how many times an event is put back while the registry
// copy lags, StaleWait/staleRetries apart, before it is resolved anyway.
const staleRetries = 20

// Worker consumes accepted events, maps them and publishes them onward, all
// that arrived together in one envelope message.
type Worker struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	cache *registry.Cache
	log   *zap.Logger
	m     *workerMetrics
}

// NewWorker returns a worker; Run starts it. Its metrics go to reg (nil:
// not exported).
func NewWorker(cfg Config, nc *nats.Conn, js jetstream.JetStream, cache *registry.Cache, reg prometheus.Registerer, log *zap.Logger) *Worker {
	return &Worker{cfg: cfg, nc: nc, js: js, cache: cache, log: log, m: newWorkerMetrics(metrics.Or(reg))}
}

// envelope is a published batch awaiting its stream ack.
type envelope struct {
	fut     jetstream.PubAckFuture
	inputs  []jetstream.Msg
	answers event.Replies // outcomes the mapper gives itself, sent once stored
}

// Run consumes until ctx ends, then stops taking messages and finishes
// publishing and acking those it holds.
func (w *Worker) Run(ctx context.Context) error {
	queue := make(chan *envelope, 256)
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		w.settle(queue)
	}()
	err := bus.ConsumeInto(ctx, w.js, bus.Durable{
		Stream: w.cfg.Names.EventsStream, Name: w.cfg.Names.MapperConsumer, AckWait: w.cfg.AckWait,
		MaxAckPending: w.cfg.MaxAckPending, PullBatch: w.cfg.PullBatch,
	}, w.log, func(in <-chan jetstream.Msg) { w.loop(in, queue) })
	close(queue)
	<-settled
	return err
}

func (w *Worker) loop(in <-chan jetstream.Msg, queue chan<- *envelope) {
	batch := make([]jetstream.Msg, 0, w.cfg.EnvelopeMax)
	for first := range in {
		batch = bus.Gather(in, append(batch[:0], first), w.cfg.EnvelopeMax, 0)
		w.process(batch, queue)
		clear(batch)
	}
}

// process maps a batch of events messages and publishes them as envelopes;
// events it cannot map are answered and dropped here. All events of one
// message go into one envelope, so that the message is acked once that
// envelope is stored. Keyed events travel in envelopes of their own (ingest-api
// publishes each alone): the writer retries those after a storage failure,
// and drops the others.
func (w *Worker) process(msgs []jetstream.Msg, queue chan<- *envelope) {
	var now event.Replies
	var open [2]building // by keyed
	// An envelope stays well under the server's message size limit.
	limit := int(w.nc.MaxPayload() / 2)
	var mapped []event.Mapped
	var devs []*registry.Entry
	for _, m := range msgs {
		evs, err := event.DecodeEvents(m.Data())
		if err != nil {
			w.log.Error("dropping unreadable events message", zap.Error(err))
			_ = m.Term()
			continue
		}
		md, _ := m.Metadata()
		delivered := uint64(1)
		if md != nil {
			delivered = md.NumDelivered
		}
		var stale bool
		devs, stale = w.lookup(evs, devs[:0])
		if delivered < staleRetries && stale {
			// Accepted under a record this copy has not seen yet: give
			// the registry watch time to deliver it.
			_ = m.NakWithDelay(w.cfg.StaleWait / staleRetries)
			w.m.staleWaits.Inc()
			continue
		}
		mapped, keyed, size := mapped[:0], false, 0
		for i, ev := range evs {
			mp, ok := w.resolve(ev, devs[i], &now)
			if !ok {
				continue
			}
			mp.MaybeStored = delivered > 1
			keyed = keyed || ev.Keyed
			mapped = append(mapped, mp)
			size += event.EnvelopeCost(&ev)
		}
		if len(mapped) == 0 {
			_ = m.Term()
			continue
		}
		b := &open[boolIndex(keyed)]
		if len(b.mapped) > 0 && (b.size+size > limit || len(b.mapped)+len(mapped) > w.cfg.EnvelopeMax) {
			w.publish(b.env, b.mapped, queue)
			*b = building{}
		}
		if b.env == nil {
			b.env = &envelope{}
		}
		for _, mp := range mapped {
			if mp.Outcome != outcome.Stored && !mp.Keyed {
				b.env.answers.Add(mp.Reply, event.Reply{ID: mp.ID, Code: mp.Outcome})
				// The mapper answers it once the envelope is stored.
				mp.Reply = ""
			}
			b.mapped = append(b.mapped, mp)
		}
		b.env.inputs = append(b.env.inputs, m)
		b.size += size
	}
	for i := range open {
		if len(open[i].mapped) > 0 {
			w.publish(open[i].env, open[i].mapped, queue)
		}
	}
	if err := now.Send(w.nc); err != nil {
		w.log.Warn("send outcomes", zap.Error(err))
	}
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

// resolve maps one event with its device record (nil: none). An event it
// cannot map is answered through now and reported not ok. The writer answers a mapped event (Reply set) when its
// values are stored or, if keyed, once it knows no earlier attempt was
// answered differently; the others the mapper answers itself.
func (w *Worker) resolve(ev event.Event, dev *registry.Entry, now *event.Replies) (event.Mapped, bool) {
	if dev == nil {
		w.m.events.WithLabelValues(outcome.DeviceNotFound.String()).Inc()
		now.Add(ev.Reply, event.Reply{ID: ev.ID, Code: outcome.DeviceNotFound})
		return event.Mapped{}, false
	}
	mp, err := Resolve(ev, dev)
	if errors.Is(err, errPayload) {
		w.log.Error("dropping event", zap.String("event_id", ev.ID), zap.Error(err))
		w.m.events.WithLabelValues(outcome.ProcessingFailed.String()).Inc()
		now.Add(ev.Reply, event.Reply{ID: ev.ID, Code: outcome.ProcessingFailed, Detail: "unreadable event payload"})
		return event.Mapped{}, false
	}
	w.m.events.WithLabelValues(mp.Outcome.String()).Inc()
	mp.Keyed = ev.Keyed
	mp.Reply = ev.Reply
	return mp, true
}

// building is an envelope being filled.
type building struct {
	env    *envelope
	mapped []event.Mapped
	size   int
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// publish sends one envelope. Its message id is derived from the events it
// holds, so a re-publish of the same batch is dropped by the stream.
func (w *Worker) publish(env *envelope, mapped []event.Mapped, queue chan<- *envelope) {
	h := sha256.New()
	for i := range mapped {
		h.Write([]byte(mapped[i].ID))
	}
	id := hex.EncodeToString(h.Sum(nil)[:16])
	fut, err := w.js.PublishMsgAsync(&nats.Msg{Subject: w.cfg.Names.MappedSubject(), Data: event.AppendEnvelope(nil, mapped)}, jetstream.WithMsgID(id))
	if err != nil {
		w.m.publishErrors.Inc()
		w.log.Warn("publish envelope, will retry", zap.Int("events", len(mapped)), zap.Error(err))
		for _, m := range env.inputs {
			_ = m.NakWithDelay(250 * time.Millisecond)
		}
		return
	}
	env.fut = fut
	queue <- env
}

// settle acks each envelope's inputs, and sends the answers the mapper
// gives itself, once the envelope is in the next stream.
func (w *Worker) settle(queue <-chan *envelope) {
	for env := range queue {
		select {
		case <-env.fut.Ok():
			w.m.envelopes.Inc()
			w.m.envelopeSize.Observe(float64(len(env.inputs)))
			if err := env.answers.Send(w.nc); err != nil {
				w.log.Warn("send outcomes", zap.Error(err))
			}
			for _, m := range env.inputs {
				_ = m.Ack()
			}
		case err := <-env.fut.Err():
			w.m.publishErrors.Inc()
			w.log.Warn("envelope not stored in stream, will retry", zap.Error(err))
			for _, m := range env.inputs {
				_ = m.NakWithDelay(250 * time.Millisecond)
			}
		}
	}
}
