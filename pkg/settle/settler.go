package settle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
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

// Limits are the bounds the settler's decisions follow.
func (s *Settler) Limits() Limits { return s.limits }

// Delivered is how often m has been delivered (1 the first time).
func Delivered(m jetstream.Msg) uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.NumDelivered
	}
	return 1
}

// Decide is Limits.Decide for message m.
func (s *Settler) Decide(m jetstream.Msg, result Result, err error, keyed bool) Decision {
	return s.limits.Decide(result, err, keyed, Delivered(m))
}

// Apply carries out d on m. err is the failure that led to it (for a dead
// letter's header), keyed whether m's events carry keys.
func (s *Settler) Apply(m jetstream.Msg, d Decision, err error, keyed bool) {
	if d.Action == DeadLetter {
		if s.deadLetter(m, m.Data(), d.Reason, err, keyed) == nil {
			s.count(DeadLetter.String(), m.Term()) // the letter holds it now
		}
		return
	}
	s.count(d.Action.String(), s.do(m, d))
}

// DeadLetterPart stores data, the part of m's events that failed for good
// (the rest were stored), as a dead letter; m itself is then settled as its
// other events require. An error means the letter was not stored: m must be
// retried rather than acked.
func (s *Settler) DeadLetterPart(m jetstream.Msg, data []byte, err error, keyed bool) error {
	err = s.deadLetter(m, data, ReasonPermanent, err, keyed)
	if err == nil {
		s.count(DeadLetter.String(), nil)
	}
	return err
}

func (s *Settler) do(m jetstream.Msg, d Decision) error {
	switch d.Action {
	case Ack:
		return m.Ack()
	case Retry:
		return m.NakWithDelay(d.Delay)
	case Drop:
		return m.Term()
	}
	return fmt.Errorf("action %d", d.Action)
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

// Dead-letter headers: why, from where, and what to replay.
const (
	HeaderReason     = "Dead-Letter-Reason"
	HeaderError      = "Dead-Letter-Error"
	HeaderSubject    = "Dead-Letter-Subject" // where a replay publishes it
	HeaderDeliveries = "Dead-Letter-Deliveries"
	HeaderKeyed      = "Dead-Letter-Keyed"
	// HeaderReplay marks a replayed message (its value: the letter's
	// sequence): its events may have been stored before.
	HeaderReplay = "Replay"
	// originalPrefix renames the original message's own Nats-* headers,
	// which would otherwise steer the dead-letter stream.
	originalPrefix = "Original-"
)

const maxErrorHeader = 512

// deadLetter publishes data with m's headers and the reason to the
// dead-letter stream and waits for the stream's ack. On failure m is
// retried later instead (never dropped without its letter stored).
func (s *Settler) deadLetter(m jetstream.Msg, data []byte, reason string, cause error, keyed bool) error {
	h := nats.Header{}
	for k, vs := range m.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			k = originalPrefix + k
		}
		h[k] = vs
	}
	h.Set(HeaderReason, reason)
	if cause != nil {
		text := cause.Error()
		if len(text) > maxErrorHeader {
			text = text[:maxErrorHeader]
		}
		h.Set(HeaderError, strings.ToValidUTF8(strings.ReplaceAll(text, "\n", " "), "?"))
	}
	h.Set(HeaderSubject, m.Subject())
	delivered := Delivered(m)
	h.Set(HeaderDeliveries, strconv.FormatUint(delivered, 10))
	h.Set(HeaderKeyed, strconv.FormatBool(keyed))
	// One letter per message delivery: a worker that dies between storing
	// the letter and settling the message stores the same letter again,
	// and the stream drops that copy.
	if md, err := m.Metadata(); err == nil {
		h.Set(nats.MsgIdHdr, fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: s.names.DeadLetterSubject(), Header: h, Data: data})
	if err != nil {
		s.count(DeadLetter.String(), err)
		s.count(Retry.String(), m.NakWithDelay(s.limits.RetryMaxDelay))
		return fmt.Errorf("store dead letter: %w", err)
	}
	s.deadLetters.WithLabelValues(reason).Inc()
	s.log.Warn("message dead-lettered", zap.String("reason", reason), zap.String("subject", m.Subject()),
		zap.Uint64("deliveries", delivered), zap.Bool("keyed", keyed), zap.Error(cause))
	return nil
}
