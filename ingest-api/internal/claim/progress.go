package claim

import (
	"context"
	"time"
)

// How far a reading of the log is: what waits for a message to be read,
// whether it caught up (the first one: the copy is ready), how far behind
// it is, and the end of a reading.

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

// caughtUp marks the reading gen caught up at from (the server's time
// when nothing was left to deliver to it); the first one makes the copy
// ready.
func (f *follower) caughtUp(gen uint64, from time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen || f.caught {
		return
	}
	f.caught, f.from = true, from
	select {
	case <-f.ready:
	default:
		close(f.ready)
	}
}

// isCaught reports whether the reading gen caught up.
func (f *follower) isCaught(gen uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return gen == f.gen && f.caught
}

// behind reports how far behind the server's time now the reading gen is
// (the age of the last message it read), if it has caught up and read
// any.
func (f *follower) behind(gen uint64, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen || !f.caught || f.lastSeq == 0 {
		return 0
	}
	return now.Sub(f.lastAt)
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
