package claim

import (
	"context"
	"strings"
	"sync"
	"time"
)

// follower is this copy's reading of the claims log: what the entries of
// the last window say of each id, the releases, and the decisions on this
// copy's own entries.
//
// An entry holds an id when no entry that holds it, and is not released,
// was stored less than the window before: an entry that did not hold (a
// retry's) does not lengthen the first attempt's claim. A reading that
// started at from (the server's time) has every entry stored since from
// minus the window (the stream keeps the window), so it can tell what an
// entry stored since from holds; what one stored before holds is unknown,
// and so is a claim that only unknown entries would block. An unknown claim
// is not this copy's to hold: its request waits for an earlier attempt's
// outcome.
type follower struct {
	window time.Duration
	own    string // the prefix of this copy's tags
	ready  chan struct{}

	mu       sync.Mutex
	readyAt  uint64    // the log's last sequence at the first start; 0: ready
	from     time.Time // when this reading started, on the server's clock
	lastSeq  uint64    // of the last message read
	ids      map[string]claimOf
	released map[string]time.Time // tag -> when its release was stored
	order    []*read              // what was read, oldest first, to drop after the window
	decided  map[string][]bool    // this copy's tags -> whether each of its ids holds
	mine     []mine               // this copy's entries decided, oldest first
	waiters  []waiter
}

// claimOf is what the log says of one id within the window: the last entry
// that held it (an earlier one within the window was released before this
// one could hold), and when the last unknown one was stored (Unix ns; 0:
// none).
type claimOf struct {
	held      *read
	unknownAt int64
}

type status uint8

const (
	held status = iota
	blocked
	unknown
)

// read is a message read: when it was stored, its ids or its release.
type read struct {
	at      time.Time
	ids     []string
	tag     string
	release bool
}

// mine is an entry of this copy's, decided.
type mine struct {
	at  time.Time
	tag string
}

type waiter struct {
	seq  uint64
	done chan struct{}
}

func newFollower(window time.Duration, own string) *follower {
	return &follower{window: window, own: own, ready: make(chan struct{}), readyAt: ^uint64(0),
		ids: map[string]claimOf{}, released: map[string]time.Time{}, decided: map[string][]bool{}}
}

// restart forgets what was read, to read the log again from its start,
// which the stream holds from from minus the window on; last is the log's
// last sequence now. Decisions on this copy's entries stay: they were
// answered.
func (f *follower) restart(from time.Time, last uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.from, f.lastSeq, f.ids, f.released, f.order = from, 0, map[string]claimOf{}, map[string]time.Time{}, nil
	if f.readyAt == ^uint64(0) {
		f.readyAt = last
		f.markReady()
	}
}

// markReady closes ready once the log is read to readyAt. f.mu is held.
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

// caughtUp marks the first reading caught up: nothing is left to deliver.
func (f *follower) caughtUp() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readyAt != ^uint64(0) {
		f.readyAt = 0
		f.markReady()
	}
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

// read takes in the message seq, stored at: an entry listing ids, tagged
// tag (untagged: a claim of 1.0.x, which held), or the release of the
// entry tag. false: it does not follow the last read (messages before it
// deleted, or expired before this reading came to them; a stream that lost
// its last messages and numbers new ones again): read the log again.
func (f *follower) read(seq uint64, at time.Time, ids []string, tag string, release bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastSeq != 0 && seq != f.lastSeq+1 {
		return false
	}
	f.lastSeq = seq
	f.forget(at)
	r := &read{at: at, ids: ids, tag: tag, release: release}
	f.order = append(f.order, r)
	if release {
		f.released[tag] = at
	} else {
		got := make([]bool, len(ids))
		for i, id := range ids {
			c := f.ids[id]
			st := held
			if tag != "" {
				st = f.holds(c, at)
			}
			switch st {
			case held:
				c.held = r
			case unknown:
				c.unknownAt = at.UnixNano()
			}
			f.ids[id], got[i] = c, st == held
		}
		if tag != "" && strings.HasPrefix(tag, f.own) {
			if _, ok := f.decided[tag]; !ok {
				f.decided[tag] = got
				f.mine = append(f.mine, mine{at: at, tag: tag})
			}
		}
	}
	n := 0
	for _, w := range f.waiters {
		if w.seq <= seq {
			close(w.done)
			continue
		}
		f.waiters[n] = w
		n++
	}
	f.waiters = f.waiters[:n]
	f.markReady()
	return true
}

// holds tells what an entry stored at at holds of the id c is about.
// f.mu is held.
func (f *follower) holds(c claimOf, at time.Time) status {
	if h := c.held; h != nil && at.Sub(h.at) < f.window {
		if _, gone := f.released[h.tag]; h.tag == "" || !gone {
			return blocked
		}
	}
	if at.Before(f.from) || (c.unknownAt != 0 && at.Sub(time.Unix(0, c.unknownAt)) < f.window) {
		return unknown
	}
	return held
}

// forget drops what was stored a window or more before now (the stream's
// time of the newest message): no entry after it can be held by those.
// f.mu is held.
func (f *follower) forget(now time.Time) {
	n := 0
	for ; n < len(f.order); n++ {
		r := f.order[n]
		if now.Sub(r.at) < f.window {
			break
		}
		if r.release {
			delete(f.released, r.tag)
			continue
		}
		for _, id := range r.ids {
			c, ok := f.ids[id]
			if !ok {
				continue
			}
			if c.held != nil && now.Sub(c.held.at) >= f.window {
				c.held = nil
			}
			if c.held == nil && now.Sub(time.Unix(0, c.unknownAt)) >= f.window {
				delete(f.ids, id)
			} else {
				f.ids[id] = c
			}
		}
	}
	f.order = f.order[n:]
	n = 0
	for ; n < len(f.mine) && now.Sub(f.mine[n].at) >= f.window; n++ {
		delete(f.decided, f.mine[n].tag)
	}
	f.mine = f.mine[n:]
}

// wait returns once the message seq has been read, or ctx ends.
func (f *follower) wait(ctx context.Context, seq uint64) error {
	f.mu.Lock()
	if f.lastSeq >= seq {
		f.mu.Unlock()
		return nil
	}
	w := waiter{seq: seq, done: make(chan struct{})}
	f.waiters = append(f.waiters, w)
	f.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		for i, o := range f.waiters {
			if o.done == w.done {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				break
			}
		}
		f.mu.Unlock()
		return ctx.Err()
	}
}

// decision is what the entry tagged tag, this copy's, held.
func (f *follower) decision(tag string) ([]bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	held, ok := f.decided[tag]
	return held, ok
}
