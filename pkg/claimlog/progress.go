package claimlog

import (
	"context"
	"time"
)

// How far a reading of the log is: what waits for a message to be read,
// whether the first one caught up (the copy is ready), and the end of a
// reading.

// restart forgets what was read, to read the log again from first, the
// stream's first sequence once the reading's consumer existed at from
// (the server's time: entries stored since from less the lookback can be
// told); last is its last sequence then. It returns the new reading's
// generation. Decisions on this copy's entries stay: they were answered.
func (f *follower) restart(from time.Time, first, last uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	f.from, f.lastSeq, f.lastAt = from.Add(-f.lookback), max(first, 1)-1, time.Time{}
	f.ids, f.released, f.order = map[string]claimOf{}, map[string]time.Time{}, nil
	f.upTo = last
	if last < max(first, 1) {
		f.caught = f.gen // nothing to read
	}
	if f.readyAt == ^uint64(0) {
		f.readyAt = last
		f.markReady()
	}
	return f.gen
}

// invalidate ends the reading gen, if it is the current one: nothing
// more of it is taken in, and what waits for a message waits for the next
// reading. It reports whether it ended it.
func (f *follower) invalidate(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return false
	}
	f.gen++
	f.lastSeq = 0
	return true
}

// current reports whether gen is the current reading.
func (f *follower) current(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return gen == f.gen
}

// last is the sequence of the last message read and when it was stored.
func (f *follower) last() (uint64, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeq, f.lastAt
}

// next is the sequence the reading gen reads next and when the last one
// read was stored (zero: none yet), if it is the current reading.
func (f *follower) next(gen uint64) (uint64, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeq + 1, f.lastAt, gen == f.gen && gen != 0
}

// markReady closes ready once the first reading has read to readyAt. f.mu
// is held.
func (f *follower) markReady() {
	if f.readyAt != 0 && f.lastSeq >= f.readyAt {
		f.readyAt = 0
	}
	if f.readyAt == 0 {
		select {
		case <-f.ready:
		default:
			close(f.ready)
		}
	}
}

// caughtUp marks the reading gen caught up (and the copy ready, if it is
// the first) when it has read up to delivered, the last message delivered
// to it, and nothing is left to deliver (the stream's last sequence at its
// start may name a message gone); it reports whether it has.
func (f *follower) caughtUp(gen, delivered uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen || f.lastSeq < delivered {
		return false
	}
	f.caught = gen
	if f.readyAt != ^uint64(0) {
		f.readyAt = 0
		f.markReady()
	}
	return true
}

// isCaught reports whether the current reading has read up to where the
// log stood at its start: what it has not read was stored since.
func (f *follower) isCaught() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen != 0 && f.caught == f.gen
}

// isReady reports whether ready is closed.
func (f *follower) isReady() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

// waiter waits for the message seq; gen is the reading that read it, set
// before done is closed.
type waiter struct {
	seq  uint64
	gen  uint64
	done chan struct{}
}

// wait returns once the message seq has been read, or ctx ends: the
// reading that read it.
func (f *follower) wait(ctx context.Context, seq uint64) (uint64, error) {
	f.mu.Lock()
	if f.lastSeq >= seq {
		defer f.mu.Unlock()
		return f.gen, nil
	}
	w := &waiter{seq: seq, done: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()
	select {
	case <-w.done:
		return w.gen, nil
	case <-ctx.Done():
		f.mu.Lock()
		for i, o := range f.waiters {
			if o == w {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				break
			}
		}
		f.mu.Unlock()
		return 0, ctx.Err()
	}
}
