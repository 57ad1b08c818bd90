package settle

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/deadletter"
)

// Settler carries out decisions on JetStream messages, and counts every
// result: nothing it does is discarded unchecked.
type Settler struct {
	js     jetstream.JetStream
	names  bus.Names
	limits Limits
	log    *zap.Logger

	settled     *prometheus.CounterVec // by action, result
	deadLetters *prometheus.CounterVec // by reason
}

// New returns a Settler for a worker whose metrics go under namespace.
func New(js jetstream.JetStream, names bus.Names, limits Limits, namespace string, reg prometheus.Registerer, log *zap.Logger) *Settler {
	s := &Settler{js: js, names: names, limits: limits, log: log,
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "settlements_total",
			Help: "JetStream messages settled, by action (ack, retry, drop, dead_letter) and result (ok, error).",
		}, []string{"action", "result"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "dead_letters_total",
			Help: "Messages moved to the dead-letter stream, by reason (permanent_failure, delivery_limit).",
		}, []string{"reason"}),
	}
	reg.MustRegister(s.settled, s.deadLetters)
	for _, a := range actionNames {
		s.settled.WithLabelValues(a, "ok")
		s.settled.WithLabelValues(a, "error")
	}
	for _, r := range []string{ReasonPermanent, ReasonDeliveryLimit} {
		s.deadLetters.WithLabelValues(r)
	}
	return s
}

// Msg is one delivered message in a worker's hands. It is settled once:
// the first Settle, Apply or Release carries its decision out, and later
// ones do nothing (and report false).
type Msg struct {
	m       jetstream.Msg
	s       *Settler
	keyed   bool
	settled atomic.Bool
	held    Decision // Hold's decision, carried out by Release
}

// Take wraps a delivered message.
func (s *Settler) Take(m jetstream.Msg) *Msg { return &Msg{m: m, s: s} }

// Data is the message's payload.
func (m *Msg) Data() []byte { return m.m.Data() }

// Header is the value of the message's header name ("" if none).
func (m *Msg) Header(name string) string { return m.m.Headers().Get(name) }

// SetKeyed says whether the message's events carry Idempotency-Keys
// (known once it is decoded): the policy's rules differ.
func (m *Msg) SetKeyed(keyed bool) { m.keyed = keyed }

// Delivered is how often the message has been delivered (1 the first time).
func (m *Msg) Delivered() uint64 {
	if md, err := m.m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 1
}

// Replay reports whether the message was replayed from the dead letters.
func (m *Msg) Replay() bool { return deadletter.IsReplay(m.m) }

// Sequence is the message's place in its stream (0: unknown).
func (m *Msg) Sequence() uint64 {
	if md, err := m.m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}

// Exhausted reports whether the message arrives past its delivery limit
// (settle it with the result Exhausted before any work).
func (m *Msg) Exhausted() bool { return m.Delivered() > uint64(m.s.limits.MaxDeliver) }

// Decide is what the policy says for the message after result (err: the
// failure, if any), without carrying it out.
func (m *Msg) Decide(result Result, err error) Decision {
	return m.s.limits.Decide(result, err, m.keyed, m.Delivered())
}

// Settle decides and carries the decision out; the caller answers the
// waiting requests as its Answer says.
func (m *Msg) Settle(result Result, err error) Decision {
	d := m.Decide(result, err)
	m.Apply(d, err)
	return d
}

// Apply carries out d (err: the failure that led to it, for a dead
// letter's header). It reports false, and does nothing, when the message
// was settled already.
func (m *Msg) Apply(d Decision, err error) bool {
	if !m.settled.CompareAndSwap(false, true) {
		m.s.log.Error("message settled twice: the second settlement is ignored", zap.String("action", d.Action.String()))
		return false
	}
	var aerr error
	switch d.Action {
	case DeadLetter:
		if m.deadLetter(m.m.Data(), d.Reason, err) != nil {
			return true // retried instead, and counted
		}
		aerr = m.m.Term() // the letter holds it now
	case Ack:
		aerr = m.m.Ack()
	case Retry:
		aerr = m.m.NakWithDelay(d.Delay)
	case Drop:
		aerr = m.m.Term()
	}
	m.s.count(d.Action.String(), aerr)
	return true
}

// Hold keeps d (an Ack) to be carried out by Release: the writer acks an
// envelope only once its raw messages are stored.
func (m *Msg) Hold(d Decision) { m.held = d }

// Release carries out the held decision once what it waited for is done,
// or, when that failed (err), settles the message as a failed hand-off.
func (m *Msg) Release(err error) {
	if err != nil {
		m.Settle(HandoffFailed, err)
		return
	}
	m.Apply(m.held, nil)
}

// DeadLetterPart stores data, the part of the message's events that failed
// for good (the rest were stored), as a dead letter; the message itself is
// then settled as its other events require. An error means the letter was
// not stored, and the message is settled already: retried as a whole.
func (m *Msg) DeadLetterPart(data []byte, err error) error {
	err = m.deadLetter(data, ReasonPermanent, err)
	if err == nil {
		m.s.count(DeadLetter.String(), nil)
	}
	return err
}

// deadLetter stores data as a dead letter. On failure the message is
// retried later instead (never dropped without its letter stored), and is
// settled.
func (m *Msg) deadLetter(data []byte, reason string, cause error) error {
	s := m.s
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	delivered := m.Delivered()
	if err := deadletter.Write(ctx, s.js, s.names, m.m, data, reason, cause, m.keyed, delivered); err != nil {
		s.count(DeadLetter.String(), err)
		m.settled.Store(true)
		s.count(Retry.String(), m.m.NakWithDelay(s.limits.RetryMaxDelay))
		return err
	}
	s.deadLetters.WithLabelValues(reason).Inc()
	s.log.Warn("message dead-lettered", zap.String("reason", reason), zap.String("subject", m.m.Subject()),
		zap.Uint64("deliveries", delivered), zap.Bool("keyed", m.keyed), zap.Error(cause))
	return nil
}

func (s *Settler) count(action string, err error) {
	if err != nil {
		s.settled.WithLabelValues(action, "error").Inc()
		// The server redelivers after AckWait: the message is late, not lost.
		s.log.Warn("settle message", zap.String("action", action), zap.Error(err))
		return
	}
	s.settled.WithLabelValues(action, "ok").Inc()
}
