package submit

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
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
)

// limits bound the messages: a batch (pkg/batcher) is a message, MaxItems
// submissions and MaxSize bytes of events (event.EnvelopeCost) at most, a
// slot a message awaiting its stream ack, which is waited for ackWait
// before the slot is given back. claimFirst: keyed events wait for their
// claims (Config.ClaimFirst).
type limits struct {
	batcher.Config
	ackWait    time.Duration
	claimFirst bool
}

// Tuned on 2 cores (docs/performance.md): up to 256 submissions a message,
// two messages awaiting their acks while the next one fills, and 2 ms for
// more to join (at 3,000/s it halved NATS's CPU).
func defaultLimits(maxBytes int, ackWait time.Duration, claimFirst bool) limits {
	return limits{batcher.Config{MaxItems: 256, MaxSize: maxBytes, Slots: 2, Linger: 2 * time.Millisecond}, ackWait, claimFirst}
}

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

// publisher gathers submissions into messages (pkg/batcher, a slot per
// message awaiting its stream ack) and publishes them; keyed submissions
// first take their claims, one each, all of a message's in one entry of
// the claims log.
type publisher struct {
	subject    string
	ackWait    time.Duration
	claimFirst bool
	js         jetstream.JetStream
	claims     *claim.Claims
	observe    func(events int)
	log        *zap.Logger
	plain      *batcher.Batcher[*submission]
	keyed      *batcher.Batcher[*submission]
	acks       chan pending
	resend     *resender
	// keyedOut counts keyed messages being claimed and published.
	keyedOut sync.WaitGroup
}

// part is a submission's events in a message.
type part struct {
	s   *submission
	evs []*event.Event
}

// pending is a message awaiting its stream ack: its submissions' events
// in it, the claims to release if it is refused (nil: unkeyed), and its
// slot.
type pending struct {
	fut     jetstream.PubAckFuture
	at      time.Time // first published
	sent    []part
	held    *claim.Claim
	release func(time.Duration)
}

func newPublisher(subject string, l limits, js jetstream.JetStream, claims *claim.Claims, observe func(int), log *zap.Logger) *publisher {
	if observe == nil {
		observe = func(int) {}
	}
	p := &publisher{subject: subject, ackWait: l.ackWait, claimFirst: l.claimFirst, js: js, claims: claims, observe: observe, log: log,
		acks: make(chan pending, 2*l.Slots)}
	p.resend = newResender(js, claims, l.ackWait, log)
	p.resend.message = p.message
	p.plain = batcher.New(l.Config, (*submission).cost, p.publishPlain)
	p.keyed = batcher.New(l.Config, (*submission).cost, p.publishKeyed)
	return p
}

// add puts s into the message being filled.
func (p *publisher) add(s *submission) error {
	if s.keyed() {
		return p.keyed.Add(s)
	}
	return p.plain.Add(s)
}

// run publishes until ctx ends; then it refuses new submissions, publishes
// what it holds, and returns once those messages are acked (or ackWait
// passed).
func (p *publisher) run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.settle()
	}()
	keyed := make(chan error, 1)
	go func() { keyed <- p.keyed.Run(ctx) }()
	err := p.plain.Run(ctx)
	err = errors.Join(err, <-keyed)
	p.keyedOut.Wait() // every message is sent
	close(p.acks)
	<-done
	p.resend.close()
	return err
}

// publishPlain sends b's events as one message; its slot is given back
// when the ack comes.
func (p *publisher) publishPlain(b *batcher.Batch[*submission], release func(time.Duration)) {
	sent := make([]part, len(b.Items))
	for i, s := range b.Items {
		sent[i] = part{s: s, evs: s.evs}
	}
	p.send(sent, nil, "", release)
}

// publishKeyed writes the claims of b's submissions in one entry of the
// claims log and publishes their events as one message, tagged with the
// entry, right after it: the writers store the events of the requests the
// entry holds (withclaim.go). With claimFirst, it publishes only the events
// of the requests it claimed, once the entry is decided. Either runs from
// a goroutine of its own (deciding takes a round trip).
func (p *publisher) publishKeyed(b *batcher.Batch[*submission], release func(time.Duration)) {
	p.keyedOut.Add(1)
	go func() {
		defer p.keyedOut.Done()
		if !p.claimFirst {
			p.sendWithClaims(b.Items, release)
			return
		}
		sent, held := p.claim(b.Items)
		p.send(sent, held, "", release)
	}()
}

// claim takes the claims of subs in one entry of the claims log, tells
// each submission whose claim another entry holds, and returns the events
// of the others and the entry (nil when it holds none).
func (p *publisher) claim(subs []*submission) ([]part, *claim.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), p.ackWait)
	defer cancel()
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.claim
	}
	tag, start := p.claims.Tag(), time.Now()
	cl, held, err := p.claims.TakeAll(ctx, ids, tag)
	if err != nil {
		// An entry perhaps stored (its answer lost) is settled and the
		// events it holds published (resend.go) while the requests
		// wait on.
		if refusedForGood(err) || !p.resend.carry(subs, tag, start) {
			for _, s := range subs {
				s.refuse(s.evs, err)
			}
		}
		return nil, nil
	}
	return heldParts(subs, held), &cl
}

// heldParts tells each of subs whose claim held[i] says another entry
// holds, and returns the events of the others.
func heldParts(subs []*submission, held []bool) []part {
	sent := make([]part, 0, len(subs))
	for i, s := range subs {
		if !held[i] {
			s.refuse(s.evs, claim.ErrTaken)
			continue
		}
		sent = append(sent, part{s: s, evs: s.evs})
	}
	return sent
}

// send publishes the events of sent as one message, tagged with the claims
// log entry tag ("": none), and hands it to settle; nothing to send gives
// the slot back at once.
func (p *publisher) send(sent []part, held *claim.Claim, tag string, release func(time.Duration)) {
	msg, n := p.message(sent, held != nil, tag)
	if n == 0 {
		release(0)
		return
	}
	p.observe(n)
	a := pending{at: time.Now(), sent: sent, held: held, release: release}
	fut, err := p.js.PublishMsgAsync(msg)
	if err != nil {
		p.refused(a, fmt.Errorf("%w: %w", errNotSent, err))
		release(0)
		return
	}
	a.fut = fut
	p.acks <- a
}

// message is the events of sent as one message; a keyed one (every event
// in it under its request's claim) is marked so, with the tag of the claims
// log entry its claims are in when the writers decide them (tag), and has
// an id that lets it be sent again (resend.go).
func (p *publisher) message(sent []part, keyed bool, tag string) (*nats.Msg, int) {
	var data []byte
	n := 0
	for _, pt := range sent {
		for _, ev := range pt.evs {
			data = event.AppendEvent(data, ev)
			n++
		}
	}
	msg := &nats.Msg{Subject: p.subject, Data: data}
	if keyed {
		msg.Header = nats.Header{bus.ClaimedHeader: {"1"}, nats.MsgIdHdr: {p.resend.id()}}
		if tag != "" {
			msg.Header.Set(bus.ClaimTagHeader, tag)
		}
	}
	return msg, n
}

// settle waits for the acks in publishing order, tells the submissions of
// a refused message, and gives slots back.
func (p *publisher) settle() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for a := range p.acks {
		timer.Reset(p.ackWait)
		select {
		case <-a.fut.Ok():
		case err := <-a.fut.Err():
			// A keyed message the stream may hold (no stream answered
			// during a leader's election, a lost connection) is sent
			// again; its requests wait on.
			if a.held == nil || refusedForGood(err) || !p.resend.start(a) {
				p.refused(a, err)
			}
		case <-timer.C:
			// No answer (a stalled leader, a lost connection): the
			// requests' own deadlines decide; the slot must not be
			// lost. A keyed message is sent again until it is known
			// stored or refused.
			if a.held != nil {
				p.resend.start(a)
			}
		}
		a.release(0)
	}
}

// refused tells the submissions of a message the stream did not take why.
// Only claims on events certainly not in the stream go (a message whose ack
// was lost with the connection, or that no stream answered, may be
// stored), so that the devices' retries are processed anew.
func (p *publisher) refused(a pending, err error) {
	if a.held != nil && refusedForGood(err) {
		ctx, cancel := context.WithTimeout(context.Background(), p.ackWait)
		if rerr := p.claims.Release(ctx, *a.held); rerr != nil {
			p.log.Warn("claims not released: retries wait for the pipeline window", zap.Int("requests", len(a.sent)), zap.Error(rerr))
		}
		cancel()
	}
	for _, pt := range a.sent {
		pt.s.refuse(pt.evs, err)
	}
}
