package submit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/retry"
)

// resender carries on keyed submissions whose answer from JetStream was
// lost (a stream leader stalled or cut off, no stream answering while a
// leader is elected, a lost connection), while their requests wait or after
// they were answered at their deadline:
//   - a message whose ack did not come is published again under its
//     message id: the events stream keeps one copy of an id for its
//     duplicate window (bus.PipelineWindow), so it is stored once either way;
//   - a claims log entry whose answer did not come is written again under
//     its tag (the stream keeps one copy of a tag for its duplicate window:
//     the answer names the entry stored first), and then the events of the
//     submissions it holds are published as above.
//
// So the claim a lost answer leaves standing gets the outcomes its retries
// wait for, instead of standing unanswered for the pipeline window. Both
// end within half the window of the first try, so that the events are in
// the pipeline long before their claim expires. Unkeyed messages are not
// sent again: their requests were answered 503, and a device's unkeyed
// retry would store a second copy.
type resender struct {
	js      jetstream.JetStream
	claims  *claim.Claims
	log     *zap.Logger
	ackWait time.Duration
	// message makes one of a submission (publisher.message).
	message func(sent []part, keyed bool, tag string) (*nats.Msg, int)
	slots   chan struct{} // bounds the submissions carried on at once
	stop    chan struct{}
	wg      sync.WaitGroup
	prefix  string
	next    atomic.Uint64
	dropped atomic.Uint64 // submissions not carried on for want of a slot
	started atomic.Uint64 // messages and claims carried on
}

// resendSlots bounds the keyed messages carried on at once (each holds its
// events, at most one message's worth); beyond them a message is left as
// it was: its claims stand for the window.
const resendSlots = 64

func newResender(js jetstream.JetStream, claims *claim.Claims, ackWait time.Duration, log *zap.Logger) *resender {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &resender{js: js, claims: claims, log: log, ackWait: ackWait, slots: make(chan struct{}, resendSlots),
		stop: make(chan struct{}), prefix: hex.EncodeToString(b[:]) + "-"}
}

// id is a new id (of a message, of a claim's attempt), unique to this
// copy's life.
func (r *resender) id() string { return r.prefix + strconv.FormatUint(r.next.Add(1), 36) }

// start publishes a's message again until the stream acks or refuses it;
// false: no slot is free. Its claims were taken up to ackWait before it was
// first published (a.at): it ends as early before the deadline.
func (r *resender) start(a pending) bool {
	return r.goCarry(a.at.Add(-r.ackWait), len(a.sent), func(ctx context.Context) error {
		return r.settle(a, r.untilStored(ctx, a.fut.Msg()))
	})
}

// carry settles the claims log entry of subs tagged tag, written first,
// and publishes the events of those it holds; false: no slot is free.
func (r *resender) carry(subs []*submission, tag string, first time.Time) bool {
	return r.goCarry(first, len(subs), func(ctx context.Context) error {
		ids := make([]string, len(subs))
		for i, s := range subs {
			ids[i] = s.claim
		}
		var cl claim.Claim
		var held []bool
		err := retry.Backoff{Initial: 500 * time.Millisecond, Max: 5 * time.Second}.Do(ctx, func(ctx context.Context) error {
			var err error
			tctx, cancel := context.WithTimeout(ctx, min(r.ackWait, 5*time.Second))
			defer cancel()
			cl, held, err = r.claims.TakeAll(tctx, ids, tag)
			return err
		}, nil)
		if err != nil {
			for _, s := range subs {
				s.refuse(s.evs, err)
			}
			return err
		}
		sent := heldParts(subs, held)
		msg, n := r.message(sent, true, "")
		if n == 0 {
			return nil
		}
		return r.settle(pending{sent: sent, held: &cl}, r.untilStored(ctx, msg))
	})
}

// goCarry runs do from a goroutine of its own, within half the pipeline
// window of first, if a slot is free.
func (r *resender) goCarry(first time.Time, requests int, do func(context.Context) error) bool {
	select {
	case r.slots <- struct{}{}:
	default:
		if n := r.dropped.Add(1); n&(n-1) == 0 { // logged at 1, 2, 4, 8, ...
			r.log.Warn("keyed requests whose answer was lost are not carried on (too many are): their claims stand for the pipeline window", zap.Uint64("times", n))
		}
		return false
	}
	r.started.Add(1)
	r.wg.Add(1)
	go func() {
		defer func() { <-r.slots; r.wg.Done() }()
		ctx, cancel := context.WithDeadline(context.Background(), first.Add(bus.PipelineWindow/2))
		defer cancel()
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := do(ctx); err != nil {
			r.log.Warn("keyed requests whose answer was lost not carried on: their claims stand for the pipeline window", zap.Int("requests", requests), zap.Error(err))
		}
	}()
	return true
}

// untilStored publishes msg until the stream acks it (a copy stored before
// is acked as a duplicate) or refuses it.
func (r *resender) untilStored(ctx context.Context, msg *nats.Msg) error {
	return retry.Backoff{Initial: 500 * time.Millisecond, Max: 5 * time.Second}.Do(ctx, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, min(r.ackWait, 5*time.Second))
		defer cancel()
		_, err := r.js.PublishMsg(actx, msg)
		if refusedForGood(err) && !inProcess(err) {
			return failure.AsPermanent(err)
		}
		return err
	}, nil)
}

// inProcess reports the stream's answer to a copy whose message id it is
// still storing (a leader slow to commit the first copy): try again.
func inProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10158
}

// settle ends a carried message: stored (the workers answer its
// requests), or refused, or not known by the deadline: its requests hear
// the error, if they still wait, and its claims stand for the window (an
// earlier copy, its answer lost, may be stored: a refusal of this one
// does not say otherwise).
func (r *resender) settle(a pending, err error) error {
	if err == nil {
		r.log.Info("keyed events stored after their answer was lost", zap.Int("requests", len(a.sent)))
		return nil
	}
	for _, pt := range a.sent {
		pt.s.refuse(pt.evs, err)
	}
	if refusedForGood(err) {
		return nil // told; the stream said why
	}
	return err
}

// refusedForGood reports a stream's refusal of a message: it is certainly
// not stored (no stream answering, by contrast, may mean a leader being
// elected).
func refusedForGood(err error) bool {
	return err != nil && NotStored(err) && !errors.Is(err, jetstream.ErrNoStreamResponse)
}

// close stops the carrying on and waits for it.
func (r *resender) close() {
	close(r.stop)
	r.wg.Wait()
}
