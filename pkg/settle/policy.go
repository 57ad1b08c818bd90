// Package settle decides the fate of every JetStream message the workers
// take, from one table (Policy): whether the requests waiting for its events
// are answered now, and whether the message is acked, retried after a delay,
// dropped, or moved to the dead-letter stream. A worker takes each message
// as a Msg, which carries the decision out exactly once; nothing else acks.
package settle

import (
	"errors"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Result is how a worker's work on one message ended.
type Result uint8

const (
	// Done: every event has its final outcome (stored, no connections,
	// device not found, a keyed retry answered with the first outcome).
	Done Result = iota
	// NotReady: a precondition is not met yet (this copy's registry has
	// not seen the device record the event was accepted under; an earlier
	// insert of the event's values awaits its quorum).
	NotReady
	// HandoffFailed: handing the work on failed after the outcome was
	// decided or while it is still pending (the next stream refused the
	// envelope, the raw message log could not be written). Nothing is
	// lost by trying again: the request, if any, still waits or has its
	// answer.
	HandoffFailed
	// StoreFailed: storing the values failed; the error's kind
	// (pkg/failure) decides the rest.
	StoreFailed
	// Exhausted: the message arrives past its delivery limit, never
	// settled (its worker died or hung on it every time): a poison
	// message, decided before any work.
	Exhausted
)

// Action is what happens to the message.
type Action uint8

const (
	Ack        Action = iota // finished: removed from its stream
	Retry                    // redelivered after a delay (Nak)
	Drop                     // removed without storing (Term)
	DeadLetter               // copied to the dead-letter stream, then removed
)

var actionNames = [...]string{"ack", "retry", "drop", "dead_letter"}

func (a Action) String() string { return actionNames[a] }

// Answer is what the requests waiting for the message's events hear now.
type Answer uint8

const (
	NoAnswer      Answer = iota // nothing yet: they go on waiting
	AnswerOutcome               // each event's own outcome
	AnswerFailure               // the stage's failure (503): not stored
)

// keyed selects rules by whether the message's events carry an
// Idempotency-Key.
type keyed uint8

const (
	anyKey keyed = iota
	unkeyedOnly
	keyedOnly
)

// Rule is one row of the policy.
type Rule struct {
	Result Result
	Kind   failure.Kind // for failures only
	keyed  keyed
	Answer Answer
	Action Action
	Reason string // of a dead letter
	Why    string
}

// Policy is the whole retry policy of the service, first match wins (a
// rule for anyFailure matches both HandoffFailed and StoreFailed of its
// kind). Retry is bounded: a message delivered MaxDeliver times that would
// be retried again goes to the dead letters instead, and its requests are
// answered as failed (Decide). Change the policy here, and only here.
var Policy = []Rule{
	{Result: Done, keyed: anyKey, Answer: AnswerOutcome, Action: Ack,
		Why: "finished: every waiting request gets its event's outcome"},
	{Result: NotReady, keyed: anyKey, Answer: NoAnswer, Action: Retry,
		Why: "the request goes on waiting while this copy catches up, or an earlier insert's quorum is decided"},
	{Result: Exhausted, keyed: anyKey, Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit,
		Why: "a poison message: it took its worker down every time, so it is kept for an operator instead of tried again"},
	{Result: anyFailure, Kind: failure.Permanent, keyed: anyKey, Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonPermanent,
		Why: "fails the same way every time: never retried, kept for an operator to replay once the cause is fixed"},
	{Result: HandoffFailed, Kind: failure.Transient, keyed: anyKey, Answer: NoAnswer, Action: Retry,
		Why: "nothing is lost by trying again: the request still waits for its outcome, or has it"},
	{Result: StoreFailed, Kind: failure.Transient, keyed: unkeyedOnly, Answer: AnswerFailure, Action: Drop,
		Why: "the device was told nothing was stored and retries: storing it later as well would store it twice"},
	{Result: StoreFailed, Kind: failure.Transient, keyed: keyedOnly, Answer: AnswerFailure, Action: Retry,
		Why: "the service keeps trying; the device's retry with the same key learns how it ended"},
}

// anyFailure in a rule matches HandoffFailed and StoreFailed.
const anyFailure Result = 255

// Decision is what Decide chose for one message.
type Decision struct {
	Answer Answer
	Action Action
	// Delay before a retried message is delivered again.
	Delay time.Duration
	// Reason of a dead letter.
	Reason string
}

// Limits bound redelivery.
type Limits struct {
	// MaxDeliver is the most deliveries of one message.
	MaxDeliver int
	// RetryDelay is the wait before the second delivery of a failed
	// message; it doubles with each delivery up to RetryMaxDelay.
	RetryDelay, RetryMaxDelay time.Duration
	// NotReadyDelay is the wait before a NotReady message comes back.
	NotReadyDelay time.Duration
}

// Register adds the redelivery bounds as settings, with a worker's
// defaults; def.RetryDelay (the first wait) is the worker's own, capped by
// RETRY_MAX_DELAY.
func (l *Limits) Register(s *envflag.Set, def Limits) {
	*l = def
	s.Int(&l.MaxDeliver, "max-deliver", def.MaxDeliver, "most deliveries of one message; a message that would be retried again goes to the dead letters")
	s.Duration(&l.RetryMaxDelay, "retry-max-delay", def.RetryMaxDelay, "longest wait between two tries of a failed message (the wait starts shorter and doubles with each try)")
}

// Validate reports the first thing wrong with l.
func (l Limits) Validate() error {
	switch {
	case l.MaxDeliver < 2:
		return errors.New("MAX_DELIVER must be at least 2")
	case l.RetryMaxDelay <= 0 || l.RetryMaxDelay > time.Hour:
		return errors.New("RETRY_MAX_DELAY must be positive and at most 1h")
	}
	return nil
}

// Reasons of dead letters (a metric label and a header).
const (
	ReasonPermanent     = "permanent_failure"
	ReasonDeliveryLimit = "delivery_limit"
)

// Decide applies the policy to a message delivered `delivered` times whose
// work ended with result (and err when Failed).
func (l Limits) Decide(result Result, err error, isKeyed bool, delivered uint64) Decision {
	failed := result == HandoffFailed || result == StoreFailed
	kind := failure.Transient
	if failed {
		kind = failure.KindOf(err)
	}
	if kind == failure.Throttled { // retried as transient, no sooner than it asks
		kind = failure.Transient
	}
	for _, r := range Policy {
		if !(r.Result == result || (r.Result == anyFailure && failed)) || (failed && r.Kind != kind) ||
			(r.keyed == keyedOnly && !isKeyed) || (r.keyed == unkeyedOnly && isKeyed) {
			continue
		}
		d := Decision{Answer: r.Answer, Action: r.Action, Reason: r.Reason}
		switch {
		case r.Action == Retry && delivered >= uint64(l.MaxDeliver):
			d = Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit}
		case r.Action == Retry && result == NotReady:
			d.Delay = l.NotReadyDelay
		case r.Action == Retry:
			d.Delay = max(l.backoff(delivered), failure.WaitOf(err))
		}
		return d
	}
	// Unreachable: the policy covers every result and kind.
	return Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonPermanent}
}

// backoff is the wait before the next delivery of a message delivered
// `delivered` times: RetryDelay doubled for each delivery after the first,
// capped at RetryMaxDelay, jittered (pkg/retry), so that the messages of one
// outage do not all come back at once.
func (l Limits) backoff(delivered uint64) time.Duration {
	return retry.Backoff{Initial: l.RetryDelay, Max: l.RetryMaxDelay}.Delay(int(min(delivered, 64)))
}
