// Package publish gathers the events of concurrent requests into JetStream
// messages: one message, one stream write and one mapper delivery for
// however many events arrived while the previous message was on its way.
package publish

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/event"
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
	// AckWait is how long a message's ack is waited for before its slot
	// is given back (its events' requests still wait for their outcome).
	AckWait time.Duration
}

// ErrClosed is returned by Add once the publisher has stopped.
var ErrClosed = errors.New("publisher stopped")

// Batch is one message: filled by Add, then published by Run.
type Batch struct {
	data   []byte
	events int
	cost   int
	failed chan struct{}
	err    error
}

// Failed is closed when the stream refused the message.
func (b *Batch) Failed() <-chan struct{} { return b.failed }

// Err is why the message was refused; valid once Failed is closed.
func (b *Batch) Err() error { return b.err }

// Observer is told the size of each message published (nil: nobody).
type Observer func(events int)

// Publisher owns the message being filled and the publishing goroutine.
type Publisher struct {
	cfg     Config
	js      jetstream.JetStream
	observe Observer

	mu     sync.Mutex
	open   *Batch
	sealed []*Batch
	closed bool

	wake  chan struct{}
	slots chan struct{}
	acks  chan pending
}

type pending struct {
	fut jetstream.PubAckFuture
	b   *Batch
}

// New returns a Publisher; Run publishes.
func New(cfg Config, js jetstream.JetStream, observe Observer) *Publisher {
	cfg.MaxEvents = max(cfg.MaxEvents, 1)
	cfg.MaxPending = max(cfg.MaxPending, 1)
	if observe == nil {
		observe = func(int) {}
	}
	return &Publisher{cfg: cfg, js: js, observe: observe,
		wake:  make(chan struct{}, 1),
		slots: make(chan struct{}, cfg.MaxPending),
		acks:  make(chan pending, cfg.MaxPending),
	}
}

// Add puts ev into the message being filled and returns that message.
func (p *Publisher) Add(ev *event.Event) (*Batch, error) {
	cost := event.EnvelopeCost(ev)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	b := p.open
	if b != nil && (b.events >= p.cfg.MaxEvents || b.cost+cost > p.cfg.MaxBytes) {
		p.sealed = append(p.sealed, b)
		b = nil
	}
	if b == nil {
		b = &Batch{failed: make(chan struct{}), data: make([]byte, 0, 256+len(ev.Payload))}
		p.open = b
	}
	b.data = event.AppendEvent(b.data, ev)
	b.events++
	b.cost += cost
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return b, nil
}

// next takes the oldest message with events, or nil.
func (p *Publisher) next() *Batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sealed) > 0 {
		b := p.sealed[0]
		p.sealed[0] = nil
		p.sealed = p.sealed[1:]
		return b
	}
	b := p.open
	p.open = nil
	return b
}

// Run publishes until ctx ends; then it refuses new events, publishes what
// it holds, and returns once those messages are acked (or AckWait passed).
func (p *Publisher) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.settle()
	}()
	defer func() {
		close(p.acks)
		<-done
	}()
	for {
		// A free slot first: while every slot is taken, events gather
		// in the open message.
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			p.finish()
			return nil
		}
		b := p.next()
		for b == nil {
			select {
			case <-p.wake:
				b = p.next()
			case <-ctx.Done():
				<-p.slots
				p.finish()
				return nil
			}
		}
		p.publish(b)
	}
}

// finish refuses new events and publishes the ones held, each message
// waiting for a slot.
func (p *Publisher) finish() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for b := p.next(); b != nil; b = p.next() {
		p.slots <- struct{}{}
		p.publish(b)
	}
}

// publish sends b; its slot is given back when the ack comes.
func (p *Publisher) publish(b *Batch) {
	p.observe(b.events)
	fut, err := p.js.PublishMsgAsync(&nats.Msg{Subject: p.cfg.Subject, Data: b.data})
	if err != nil {
		b.err = err
		close(b.failed)
		<-p.slots
		return
	}
	p.acks <- pending{fut: fut, b: b}
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
			a.b.err = err
			close(a.b.failed)
		case <-timer.C:
			// No answer (a lost connection): the requests' own
			// deadlines decide; the slot must not be lost.
		}
		<-p.slots
	}
}
