// Package claim keeps one attempt of each keyed request in the pipeline at a
// time. Before a request sent with an Idempotency-Key is published it takes
// one claim, on an id derived from the key (event.ClaimID: the reading's
// event id, or the backlog's): a message on <prefix>.claims.<id> in the
// claims stream, stored only if that subject holds none. A retry that finds
// the claim taken waits for the first attempt's outcomes instead of entering
// the pipeline a second time, on whichever ingest-api copy it arrives.
//
// A claim guards one request's events whatever message carries them, so
// keyed events share JetStream messages with the events of concurrent
// requests. It lasts the pipeline window (bus.PipelineWindow, the stream's
// MaxAge; after it, writer-worker's record of outcomes answers a retry); it
// is deleted at once when the request's events never entered the events
// stream, so that the device's retry is processed as a new request.
package claim

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
)

// ErrTaken means another attempt with the same id holds the claim.
var ErrTaken = errors.New("an earlier attempt with this Idempotency-Key is in the pipeline")

// Claims takes and releases claims in the claims stream.
type Claims struct {
	js     jetstream.JetStream
	names  bus.Names
	stream jetstream.Stream
}

// Open returns Claims on the stream names.ClaimsStream, which
// bus.EnsureStreams creates.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names) (*Claims, error) {
	st, err := js.Stream(ctx, names.ClaimsStream)
	if err != nil {
		return nil, fmt.Errorf("claims stream %s: %w", names.ClaimsStream, err)
	}
	return &Claims{js: js, names: names, stream: st}, nil
}

// Claim is a claim taken: its sequence in the claims stream.
type Claim struct{ seq uint64 }

// TakeAll claims every one of ids in one round trip, each claim holding
// tags[i] (the attempt's own mark, so that Resolve can tell it; nil: none):
// cls[i] is the claim on ids[i] when errs[i] is nil.
func (c *Claims) TakeAll(ctx context.Context, ids, tags []string) (cls []Claim, errs []error) {
	cls, errs = make([]Claim, len(ids)), make([]error, len(ids))
	futs := make([]jetstream.PubAckFuture, len(ids))
	for i, id := range ids {
		msg := &nats.Msg{Subject: c.names.ClaimSubject(id)}
		if tags != nil {
			msg.Data = []byte(tags[i])
		}
		futs[i], errs[i] = c.js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(0))
	}
	for i, fut := range futs {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("claim: %w", errs[i])
			continue
		}
		select {
		case ack := <-fut.Ok():
			cls[i] = Claim{seq: ack.Sequence}
		case err := <-fut.Err():
			if isTaken(err) {
				errs[i] = ErrTaken
			} else {
				errs[i] = fmt.Errorf("claim: %w", err)
			}
		case <-ctx.Done():
			// Perhaps taken, perhaps not: a retry may wait for the
			// pipeline window.
			errs[i] = fmt.Errorf("claim: %w", ctx.Err())
		}
	}
	return cls, errs
}

// Resolve settles a claim on id tagged tag whose answer was lost (a
// stalled stream leader, a lost connection): it takes the claim if nothing
// holds it, and returns it as well when the claim standing is the one
// tagged tag (the lost attempt was stored). ErrTaken: another attempt
// holds it; another error: not known yet, ask again.
func (c *Claims) Resolve(ctx context.Context, id, tag string) (Claim, error) {
	subject := c.names.ClaimSubject(id)
	ack, err := c.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(tag)}, jetstream.WithExpectLastSequencePerSubject(0))
	if err == nil {
		return Claim{seq: ack.Sequence}, nil
	}
	if !isTaken(err) {
		return Claim{}, fmt.Errorf("claim: %w", err)
	}
	m, err := c.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return Claim{}, fmt.Errorf("claim: %w", err) // gone meanwhile: take it again
	}
	if tag != "" && string(m.Data) == tag {
		return Claim{seq: m.Sequence}, nil
	}
	return Claim{}, ErrTaken
}

// isTaken reports a refusal because the subject holds a message: code 10071,
// or 10164 from a replicated stream.
func isTaken(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Release deletes claims whose events never entered the events stream. A
// claim that cannot be deleted lasts the pipeline window: until then, retries
// wait for an outcome that will not come and are answered 503.
func (c *Claims) Release(ctx context.Context, cls ...Claim) error {
	var errs []error
	for _, cl := range cls {
		if cl.seq == 0 {
			continue
		}
		if err := c.stream.DeleteMsg(ctx, cl.seq); err != nil {
			errs = append(errs, fmt.Errorf("release claim: %w", err))
		}
	}
	return errors.Join(errs...)
}
