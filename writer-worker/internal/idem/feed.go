package idem

// Seen's feed: the claims stream followed into the filter, and event_keys
// read at its start.

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Run fills the filter until ctx ends, starting again after a failure or
// a break in the feed.
func (s *Seen) Run(ctx context.Context) error {
	if s == nil {
		<-ctx.Done()
		return nil
	}
	retry.Backoff{Initial: time.Second, Max: 30 * time.Second}.Loop(ctx, s.follow, func(err error) {
		s.log.Warn("keys seen: starting again; until then keyed events are looked up", zap.Error(err))
	})
	return nil
}

// follow starts the filter afresh: the claims' feed first, then event_keys
// over the window, and keeps it until ctx ends or the feed breaks.
func (s *Seen) follow(ctx context.Context) error {
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.f, s.held, s.heldIDs, s.complete, s.caughtUpAt, s.lastSeq, s.minOffset, s.offsetKnown = newFilter(s.window, s.bytes), nil, map[string]int{}, false, time.Time{}, 0, 0, false
	s.broken = make(chan struct{})
	broken := s.broken
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.complete = false
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-broken:
			cancel() // the read of event_keys too
		case <-ctx.Done():
		}
	}()
	st, err := s.js.Stream(ctx, s.names.ClaimsStream)
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.claimed(gen, m) }, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.log.Debug("claims' feed", zap.Error(err))
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	since := time.Now().Add(-s.window)
	rows := 0
	err = s.keys.EachKey(ctx, since.UnixNano(), func(id string, tsNs int64) {
		s.mu.Lock()
		s.f.add(id, time.Unix(0, tsNs), time.Now())
		if rows++; rows%4096 == 0 {
			s.settle(time.Now()) // claims arriving meanwhile are not held longer than they must
		}
		s.mu.Unlock()
	})
	if err != nil {
		if ctx.Err() != nil {
			return errFeedBroken
		}
		return err
	}
	s.mu.Lock()
	s.complete = true // answers once the feed is known caught up (check)
	s.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.check(ctx, cons)
		select {
		case <-ctx.Done():
			select {
			case <-broken:
				return errFeedBroken
			default:
				return ctx.Err()
			}
		case <-tick.C:
		}
	}
}

// check asks the server how far the feed is: when it has delivered every
// claim and this copy has taken them in, the feed is caught up as of the
// question.
func (s *Seen) check(ctx context.Context, cons jetstream.Consumer) {
	asked := time.Now()
	ictx, cancel := context.WithTimeout(ctx, s.fresh/2)
	info, err := cons.Info(ictx)
	cancel()
	answered := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !info.TimeStamp.IsZero() {
		// The server's time as it answered: the clocks' difference plus
		// at most the round trip, whether or not claims come.
		s.offsetSample(answered.Sub(info.TimeStamp))
	}
	s.settle(time.Now())
	if err == nil && info.NumPending == 0 && s.lastSeq >= info.Delivered.Stream {
		s.caughtUpAt = asked
	}
}

// offsetSample takes in a measure of this copy's clock minus the server's,
// plus a delay: minOffset is the least of them. s.mu is held.
func (s *Seen) offsetSample(d time.Duration) {
	if !s.offsetKnown || d < s.minOffset {
		s.minOffset, s.offsetKnown = d, true
	}
}

// claimed takes one message of the claims log from the feed of run gen:
// an entry's ids (a release adds none: an id it frees is looked up).
func (s *Seen) claimed(gen uint64, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	ids, _, release := s.names.ClaimEntry(m.Subject(), m.Data())
	if release {
		ids = nil
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return // a stopped run's
	}
	offset := now.Sub(meta.Timestamp)
	s.offsetSample(offset)
	seq := meta.Sequence.Stream
	// A gap in the sequence is claims deleted (released) or expired
	// before delivery; the latter is possible once the claim before it,
	// counting how late it came, is half the window old.
	if s.lastSeq != 0 && seq != s.lastSeq+1 && (seq <= s.lastSeq || now.Sub(s.lastAt)+s.lastLag > bus.PipelineWindow/2) {
		s.breakFeed()
		return
	}
	s.lastSeq, s.lastAt, s.lastLag = seq, now, offset-s.minOffset
	for _, id := range ids {
		s.held = append(s.held, claimSeen{id: id, ts: meta.Timestamp})
		s.heldIDs[id]++
	}
}

// breakFeed marks the filter incomplete; follow starts again.
func (s *Seen) breakFeed() {
	s.complete = false
	select {
	case <-s.broken:
	default:
		close(s.broken)
	}
}

// settle moves the claims taken hold ago or more into the filter. A claim
// was taken at its stream time plus minOffset on this copy's clock, or
// before (minOffset is the least receipt-minus-server-time seen, of claims
// and of the consumer's info at each check: the clocks' difference and the
// quickest answer): so a claim delivered late (this copy catching up at its
// start) joins as old as it is, and never later than hold after its
// receipt.
func (s *Seen) settle(now time.Time) {
	n := 0
	for ; n < len(s.held); n++ {
		at := s.held[n].ts.Add(s.minOffset)
		if now.Sub(at) < s.hold {
			break
		}
		id := s.held[n].id
		s.f.add(id, at, now)
		if s.heldIDs[id]--; s.heldIDs[id] <= 0 {
			delete(s.heldIDs, id)
		}
	}
	s.held = s.held[n:]
}
