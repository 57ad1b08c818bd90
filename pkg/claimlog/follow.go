package claimlog

import (
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
// started at T (the server's time, once its consumer existed) is
// delivered every entry stored since T minus the stream's MaxAge (the
// window and the lookback), so it can tell what an entry stored since
// from = T minus the lookback holds; what one stored before holds is
// unknown, and so is a claim that an unknown entry, not released, would
// block. An unknown claim is not this copy's to hold: its request waits for
// an earlier attempt's outcome. The copy that wrote an entry releases
// every id it does not hold (Claims.TakeAll): one it cannot tell may hold
// for a copy that can, and one it holds blocked holds nothing for any copy
// that can tell; releasing it keeps the copies that cannot tell from
// taking it for a claim.
//
// A message missing from the sequence was deleted (a copy of 1.0.x
// releasing its claim, an operator), or expired before the reading came
// to it (a reading slow at its start; the ordered consumer dropping what
// it had buffered when it makes itself again). Expiry is not replicated
// (each replica expires on its own clock), so the leader cannot say which.
// But a replica expires messages in sequence order, a message once it is
// the window old on its clock: when the message read before the gap is
// younger than the window by more than twice what the servers' clocks may
// differ (skewMargin; a later message may be stamped earlier after a
// leader change), nothing after it can have expired, and the missing ones
// were deleted: they hold nothing. Otherwise they may have expired unread,
// and may have held what later entries claim; one that expired on some
// replica by the server's time now was stored before now plus skewMargin
// minus the MaxAge, so every claim is unknown until now plus skewMargin
// minus the lookback.
// A reading that read a claim of 1.0.x before it was
// deleted keeps it, and takes an entry it blocks for unknown: that entry
// may hold for a copy that did not read the claim.
type follower struct {
	window time.Duration
	// lookback is how much longer than the window the stream keeps
	// entries (its MaxAge less the window): a reading that starts at T
	// can tell what the entries stored since T - lookback hold.
	lookback time.Duration
	own      string // the prefix of this copy's tags
	ready    chan struct{}

	mu       sync.Mutex
	gen      uint64    // the reading's: a message of another is not taken in
	readyAt  uint64    // the log's last sequence at the first start; 0: ready
	from     time.Time // entries stored before it are unknown (server's clock)
	upTo     uint64    // the log's last sequence when the reading started
	caught   uint64    // the reading that read up to its upTo
	lastSeq  uint64    // of the last message read
	lastAt   time.Time // when it was stored
	ids      map[string]claimOf
	released map[string]time.Time // releaseKey -> when the release was stored
	order    []*read              // what was read, oldest first, to drop after the window
	decided  map[string]Entry     // tags (those under own) -> what the entry holds, kept as mine
	mine     []mine               // the entries decided, oldest first
	waiters  []*waiter
	byTag    map[string][]chan struct{} // closed once the entry tagged so is decided
}

// claimOf is what the log says of one id within the window: the last entry
// that held it (an earlier one within the window was released before this
// one could hold), and the entries whose hold this reading cannot tell,
// oldest first.
type claimOf struct {
	held    *read
	unknown []*read
}

// Status is what an entry holds of one of its ids.
type Status uint8

const (
	// Held: the entry holds the id's claim; its events may be stored.
	Held Status = iota
	// Blocked: an earlier entry holds it (a retry's entry).
	Blocked
	// Unknown: this reading cannot tell (an entry from before it started
	// may hold it): the entry holds nothing this copy may act on.
	Unknown
)

// read is a message read: when it was stored, its ids (an entry's, or
// those its release frees: none, all of them), its tag, whether a release.
type read struct {
	at      time.Time
	ids     []string
	tag     string
	release bool
}

// releaseKey is the key in follower.released of the release of the entry
// tagged tag, of all its ids (id "") or of one.
func releaseKey(tag, id string) string { return tag + "\n" + id }

// mine is an entry decided, kept as long as the stream keeps it (the
// window and the lookback): an envelope a writer tries again that long
// still finds its decision.
type mine struct {
	at  time.Time
	tag string
}

func newFollower(window, lookback time.Duration, own string) *follower {
	return &follower{window: window, lookback: lookback, own: own, ready: make(chan struct{}), readyAt: ^uint64(0),
		ids: map[string]claimOf{}, released: map[string]time.Time{}, decided: map[string]Entry{},
		byTag: map[string][]chan struct{}{}}
}

// read takes in the message seq of reading gen, stored at: an entry
// listing ids, tagged tag (untagged: a claim of 1.0.x, which held), or the
// release of the entry tag (of the ids listed; none listed: of all).
// unknownUntil: messages missing before it may have expired unread, and
// claims are unknown until then (zero: none missing, or deleted). A message
// of another reading is dropped. false: the sequence went back (a stream
// that lost its last messages numbers new ones again): read the log again.
// Before it has read anything, a reading takes in a message before the
// first sequence it was told of (a replica whose expiry runs behind the
// leader's).
func (f *follower) read(gen, seq uint64, at time.Time, ids []string, tag string, release bool, unknownUntil time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen == 0 || gen != f.gen {
		return true // 0: before the first reading started
	}
	if seq <= f.lastSeq && !f.lastAt.IsZero() {
		f.gen++ // the reading ends here
		f.lastSeq = 0
		return false
	}
	if unknownUntil.After(f.from) {
		f.from = unknownUntil
	}
	f.lastSeq, f.lastAt = seq, at
	if seq >= f.upTo {
		f.caught = gen
	}
	f.forget(at)
	r := &read{at: at, ids: ids, tag: tag, release: release}
	f.order = append(f.order, r)
	if release {
		f.release(r)
	} else {
		f.entry(r)
	}
	n := 0
	for _, w := range f.waiters {
		if w.seq <= seq {
			w.gen = gen
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

// release takes in the release r. f.mu is held.
func (f *follower) release(r *read) {
	if len(r.ids) == 0 {
		f.released[releaseKey(r.tag, "")] = r.at
	}
	for _, id := range r.ids {
		f.released[releaseKey(r.tag, id)] = r.at
	}
}

// entry decides what the entry r holds of each of its ids. f.mu is held.
func (f *follower) entry(r *read) {
	got := make([]Status, len(r.ids))
	for i, id := range r.ids {
		c := f.ids[id]
		st := Held
		if r.tag != "" {
			st = f.holds(id, c, r.at)
		}
		if st == Blocked && c.held.tag == "" {
			// A claim of 1.0.x is released by deleting it, unseen by
			// a reading that read it before: an entry it blocks may
			// hold for a copy that did not read the claim. Its copy
			// releases it as it releases any it cannot tell.
			st = Unknown
		}
		switch st {
		case Held:
			c.held = r
		case Unknown:
			c.unknown = append(c.unknown, r)
		}
		f.ids[id], got[i] = c, st
	}
	if r.tag != "" && strings.HasPrefix(r.tag, f.own) {
		if _, ok := f.decided[r.tag]; !ok {
			f.decided[r.tag] = Entry{IDs: r.ids, Status: got}
			f.mine = append(f.mine, mine{at: r.at, tag: r.tag})
		}
		for _, ch := range f.byTag[r.tag] {
			close(ch)
		}
		delete(f.byTag, r.tag)
	}
}

// holds tells what an entry stored at at holds of id, c being what the
// log says of it. f.mu is held.
func (f *follower) holds(id string, c claimOf, at time.Time) Status {
	if h := c.held; h != nil && at.Sub(h.at) < f.window && !f.isReleased(h, id) {
		return Blocked
	}
	if at.Before(f.from) {
		return Unknown
	}
	for _, u := range c.unknown {
		if at.Sub(u.at) < f.window && !f.isReleased(u, id) {
			return Unknown
		}
	}
	return Held
}

// isReleased reports whether the entry r's hold on id is released. f.mu is
// held.
func (f *follower) isReleased(r *read, id string) bool {
	if r.tag == "" {
		return false // 1.0.x deleted its claims to release them
	}
	_, all := f.released[releaseKey(r.tag, "")]
	_, one := f.released[releaseKey(r.tag, id)]
	return all || one
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
			delete(f.released, releaseKey(r.tag, ""))
			for _, id := range r.ids {
				delete(f.released, releaseKey(r.tag, id))
			}
			continue
		}
		for _, id := range r.ids {
			if c, ok := f.ids[id]; ok {
				f.expire(id, c, now)
			}
		}
	}
	f.order = f.order[n:]
	n = 0
	for ; n < len(f.mine) && now.Sub(f.mine[n].at) >= f.window+f.lookback; n++ {
		delete(f.decided, f.mine[n].tag)
	}
	f.mine = f.mine[n:]
}

// expire drops from c, what the log says of id, the entries a window or
// more before now. f.mu is held.
func (f *follower) expire(id string, c claimOf, now time.Time) {
	if c.held != nil && now.Sub(c.held.at) >= f.window {
		c.held = nil
	}
	k := 0
	for k < len(c.unknown) && now.Sub(c.unknown[k].at) >= f.window {
		k++
	}
	c.unknown = c.unknown[k:]
	if c.held == nil && len(c.unknown) == 0 {
		delete(f.ids, id)
		return
	}
	f.ids[id] = c
}
