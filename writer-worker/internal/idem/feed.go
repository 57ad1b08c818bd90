package idem

// Seen's feed: the writer's reading of the claims log tells Seen what it
// reads (Seen is its claimlog.Tap); event_keys is read at each start of
// that reading, and again when it may have lost claims.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/retry"
)

// Run reads event_keys into the filter each time the claims log's reading
// asks, until ctx ends, trying again after a failure.
func (s *Seen) Run(ctx context.Context) error {
	if s == nil {
		<-ctx.Done()
		return nil
	}
	retry.Backoff{Initial: time.Second, Max: 30 * time.Second}.Loop(ctx, s.loadAsked, func(err error) {
		s.log.Warn("keys seen: event_keys not read; until they are, keyed events are looked up", zap.Error(err))
	})
	return nil
}

// loadAsked reads event_keys over the window whenever the reading asked
// for it since the last read started, until ctx ends or a read fails.
func (s *Seen) loadAsked(ctx context.Context) error {
	for {
		s.mu.Lock()
		asked, loaded := s.asked, s.loaded
		s.mu.Unlock()
		if asked == loaded {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.wake:
			}
			continue
		}
		s.mu.Lock()
		s.started = asked
		s.mu.Unlock()
		since := time.Now().Add(-s.window)
		rows := 0
		err := s.keys.EachKey(ctx, since.UnixNano(), func(id string, tsNs int64) {
			s.mu.Lock()
			s.f.add(id, time.Unix(0, tsNs), time.Now())
			if rows++; rows%4096 == 0 {
				s.settle(time.Now()) // claims arriving meanwhile are not held longer than they must
			}
			s.mu.Unlock()
		})
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.loaded = asked // complete, unless the reading asked again meanwhile
		s.mu.Unlock()
	}
}

// ask has event_keys read again; until then Seen answers nothing. s.mu is
// held.
func (s *Seen) ask() {
	s.asked++
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Restarted: a reading of the claims log starts (claimlog.Tap). It reads
// every claim the stream still holds, those held here too (taken in again
// in order, the oldest first); what expired before it is read from
// event_keys. The filter keeps what it has: a claim taken in twice, or
// one no longer in the stream, only costs a lookup.
func (s *Seen) Restarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(time.Now()) // what is past hold joins the filter: it may have expired from the stream since
	s.held, s.heldIDs = nil, map[string]int{}
	s.caughtUpAt, s.starting = time.Time{}, true
	s.ask()
}

// Read takes in one message of the claims log (claimlog.Tap): an entry's
// ids (a release adds none: an id it frees is looked up). Claims lost
// before it (expired unread) may be of events stored since the last read
// of event_keys began: it is read again. Before a reading's first message
// they are what expired before it arrived, which the read its start asked
// for covers if that read has not begun yet.
func (s *Seen) Read(at, recv time.Time, ids []string, release, lost bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offsetSample(recv.Sub(at))
	if lost && !(s.starting && s.started < s.asked) {
		s.ask()
	}
	s.starting = false
	if release {
		return
	}
	for _, id := range ids {
		s.held = append(s.held, claimSeen{id: id, ts: at})
		s.heldIDs[id]++
	}
}

// Checked takes in how far the reading is (claimlog.Tap): the server's
// time as it answered gives the clocks' difference plus at most the round
// trip, whether or not claims come; caught, the reading was caught up as
// of the question.
func (s *Seen) Checked(asked, answered, server time.Time, caught bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !server.IsZero() {
		s.offsetSample(answered.Sub(server))
	}
	s.settle(time.Now())
	if caught {
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
