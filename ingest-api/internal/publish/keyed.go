package publish

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/event"
)

// keyedEvent is a keyed event waiting for its message, and where its
// request learns that it did not enter the events stream.
type keyedEvent struct {
	ev     *event.Event
	failed chan error
}

// AddKeyed puts a keyed ev into the keyed message being filled. The channel
// gets one error if ev does not enter the events stream: claim.ErrTaken when
// another attempt with its id holds the claim (its outcome is the answer),
// else why it was not published. It gets nothing when ev entered the stream,
// or when no answer came (a lost connection: the claim stands).
func (p *Publisher) AddKeyed(ev *event.Event) (<-chan error, error) {
	k := &keyedEvent{ev: ev, failed: make(chan error, 1)}
	if _, err := p.keyed.Add(k); err != nil {
		return nil, err
	}
	return k.failed, nil
}

// publishKeyed claims b's events and publishes those it claimed as one
// message; its slot is given back when that message's ack comes.
func (p *Publisher) publishKeyed(b *batcher.Batch[*keyedEvent], release func(time.Duration)) {
	p.observe(len(b.Items))
	p.keyedOut.Add(1)
	go func() {
		defer p.keyedOut.Done()
		sent, held, data := p.claim(b.Items)
		if len(sent) == 0 {
			release(0)
			return
		}
		p.send(data, func(err error) { p.refused(sent, held, err) }, release)
	}()
}

// claim takes the claims of items in one round trip, tells those whose
// claim it could not take, and returns the others, their claims and their
// message.
func (p *Publisher) claim(items []*keyedEvent) (sent []*keyedEvent, held []claim.Claim, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.AckWait)
	defer cancel()
	ids := make([]string, len(items))
	for i, k := range items {
		ids[i] = k.ev.ID
	}
	cls, errs := p.claims.TakeAll(ctx, ids)
	data = make([]byte, 0, 256*len(items))
	sent = make([]*keyedEvent, 0, len(items))
	held = make([]claim.Claim, 0, len(items))
	for i, k := range items {
		if errs[i] != nil {
			k.failed <- errs[i]
			continue
		}
		data = event.AppendEvent(data, k.ev)
		sent, held = append(sent, k), append(held, cls[i])
	}
	return sent, held, data
}

// refused tells the events of a keyed message the stream did not take why.
// Only claims on events certainly not in the stream go (a message whose ack
// was lost with the connection may be stored), so that the devices' retries
// are processed anew.
func (p *Publisher) refused(sent []*keyedEvent, held []claim.Claim, err error) {
	if NotStored(err) {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.AckWait)
		if rerr := p.claims.Release(ctx, held...); rerr != nil {
			p.log.Warn("claims not released: retries wait for the dedupe window", zap.Int("events", len(held)), zap.Error(rerr))
		}
		cancel()
	}
	for _, k := range sent {
		k.failed <- err
	}
}
