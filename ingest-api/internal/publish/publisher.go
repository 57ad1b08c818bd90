// Package publish gathers the events of concurrent requests into JetStream
// messages: one message, one stream write and one mapper delivery for
// however many events arrived while the previous message was on its way.
// Keyed events (sent with an Idempotency-Key) fill messages of their own,
// so that every message, and the envelope the mapper makes of it, is settled
// by one rule; each message's events first take their claims (see
// ingest-api/internal/claim), all in one round trip.
package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/event"
)

// Tuned on 2 cores (docs/performance.md): up to 256 events a message, two
// messages awaiting their acks while the next one fills, and 2 ms for more
// events to join (at 3,000/s it halved NATS's CPU).
const (
	MaxEvents  = 256
	MaxPending = 2
	Linger     = 2 * time.Millisecond
)

// Config bounds the messages.
type Config struct {
	Subject string
	// MaxEvents is the most events one message carries (1: one message
	// per event).
	MaxEvents int
	// MaxBytes bounds a message's events, counted by event.EnvelopeCost as
	// the mapper counts them, so that one message always fits in one
	// envelope.
	MaxBytes int
	// MaxPending is how many messages may await the stream's ack at once.
	// While they do, new events join the next message: batches grow with
	// load and an idle system publishes each event at once.
	MaxPending int
	// Linger is how long a message waits for more events once it has one
	// (0: none). At moderate rates, when slots are free, it is what lets
	// concurrent requests share a message.
	Linger time.Duration
	// AckWait is how long a message's ack is waited for before its slot
	// is given back (its events' requests still wait for their outcome).
	AckWait time.Duration
}

// ErrClosed is returned by Add once the publisher has stopped.
var ErrClosed = batcher.ErrClosed

// errNotSent marks a message that never left this process.
var errNotSent = errors.New("not sent")

// NotStored reports whether err, from publishing, means the events
// certainly are not in the stream: the message was never sent, no stream
// listens on the subject, or the stream refused it. Another failure (a lost
// connection while the ack was awaited) may hide a stored message.
func NotStored(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, errNotSent) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &apiErr)
}

// Batch is one message: its events, and whether the stream refused it.
type Batch = batcher.Batch[*event.Event]

// Observer is told the size of each message published (nil: nobody).
type Observer func(events int)

// Publisher gathers events into messages (pkg/batcher, a slot per message
// awaiting its stream ack) and publishes them.
type Publisher struct {
	cfg     Config
	js      jetstream.JetStream
	observe Observer
	claims  *claim.Claims
	log     *zap.Logger
	batches *batcher.Batcher[*event.Event] // unkeyed events
	keyed   *batcher.Batcher[*keyedEvent]
	acks    chan pending
	// keyedOut counts keyed messages being claimed and published.
	keyedOut sync.WaitGroup
}

// pending is a message awaiting its stream ack: fail is told if the
// stream refuses it, release gives its slot back.
type pending struct {
	fut     jetstream.PubAckFuture
	fail    func(error)
	release func(time.Duration)
}

// New returns a Publisher; Run publishes. Keyed events are claimed in
// claims.
func New(cfg Config, js jetstream.JetStream, claims *claim.Claims, observe Observer, log *zap.Logger) *Publisher {
	cfg.MaxPending = max(cfg.MaxPending, 1)
	if observe == nil {
		observe = func(int) {}
	}
	p := &Publisher{cfg: cfg, js: js, claims: claims, observe: observe, log: log, acks: make(chan pending, 2*cfg.MaxPending)}
	bc := batcher.Config{MaxItems: cfg.MaxEvents, MaxSize: cfg.MaxBytes, Slots: cfg.MaxPending, Linger: cfg.Linger}
	p.batches = batcher.New(bc, event.EnvelopeCost, p.publish)
	p.keyed = batcher.New(bc, func(k *keyedEvent) int { return event.EnvelopeCost(k.ev) }, p.publishKeyed)
	return p
}

// Add puts an unkeyed ev into the message being filled and returns that
// message.
func (p *Publisher) Add(ev *event.Event) (*Batch, error) { return p.batches.Add(ev) }

// AddGroup puts the unkeyed events of one backlog request into one message,
// so that they travel the pipeline as one unit, and returns that message.
func (p *Publisher) AddGroup(evs []*event.Event) (*Batch, error) { return p.batches.AddAll(evs) }

// Run publishes until ctx ends; then it refuses new events, publishes what
// it holds, and returns once those messages are acked (or AckWait passed).
func (p *Publisher) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.settle()
	}()
	keyed := make(chan error, 1)
	go func() { keyed <- p.keyed.Run(ctx) }()
	err := p.batches.Run(ctx)
	err = errors.Join(err, <-keyed)
	p.keyedOut.Wait() // every message is sent
	close(p.acks)
	<-done
	return err
}

// publish sends b's events as one message; its slot is given back when the
// ack comes.
func (p *Publisher) publish(b *Batch, release func(time.Duration)) {
	p.observe(len(b.Items))
	data := make([]byte, 0, 256*len(b.Items))
	for _, ev := range b.Items {
		data = event.AppendEvent(data, ev)
	}
	p.send(data, b.Fail, release)
}

// send publishes data as one message, keyed or not, and hands it to settle.
func (p *Publisher) send(data []byte, fail func(error), release func(time.Duration)) {
	fut, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.cfg.Subject, Data: data})
	if err != nil {
		fail(fmt.Errorf("%w: %w", errNotSent, err))
		release(0)
		return
	}
	p.acks <- pending{fut: fut, fail: fail, release: release}
}

// settle waits for the acks in publishing order, tells the events of a
// refused message, and gives slots back.
func (p *Publisher) settle() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for a := range p.acks {
		timer.Reset(p.cfg.AckWait)
		select {
		case <-a.fut.Ok():
		case err := <-a.fut.Err():
			a.fail(err)
		case <-timer.C:
			// No answer (a lost connection): the requests' own
			// deadlines decide; the slot must not be lost.
		}
		a.release(0)
	}
}
