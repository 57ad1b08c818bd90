package guard

import (
	"net/netip"
	"sync"
	"time"
)

// maxSources bounds the addresses Failures remembers (about 64 bytes
// each). When it is full of addresses still within their window, a new
// address is not tracked: the table cannot grow, and the count of
// untracked failures says that an attack is spread that wide.
const maxSources = 1 << 16

// Failures counts failed authentications per client address and refuses
// an address that had too many: AuthFailures in a window of AuthWindow,
// then refused until the window ends. The device an attacker guesses at
// is not locked: it posts from its own address.
type Failures struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.RWMutex // every request reads; only failures write
	sources   map[netip.Addr]*window
	swept     time.Time
	untracked uint64
}

type window struct {
	start   time.Time
	count   int
	blocked time.Time // refused until then
}

// NewFailures allows limit failures per window and address. A nil
// *Failures refuses nobody.
func NewFailures(limit int, per time.Duration) *Failures {
	return &Failures{limit: limit, window: per, now: time.Now, sources: make(map[netip.Addr]*window)}
}

// Refused reports whether the address a is refused now, and for how long
// more.
func (f *Failures) Refused(a netip.Addr) (time.Duration, bool) {
	if f == nil {
		return 0, false
	}
	now := f.now()
	f.mu.RLock()
	defer f.mu.RUnlock()
	w := f.sources[Source(a)]
	if w == nil || !now.Before(w.blocked) {
		return 0, false
	}
	return w.blocked.Sub(now), true
}

// Fail notes a failed authentication from a. It reports whether a is now
// refused, and whether this failure is past the limit: a request that got
// by the door while others from a used up the limit, to be answered as the
// refusal it would have met, so that no address has more than the limit
// of failures answered in a window.
func (f *Failures) Fail(a netip.Addr) (refused, over bool) {
	if f == nil {
		return false, false
	}
	now := f.now()
	key := Source(a)
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.sources[key]
	if w == nil {
		if len(f.sources) >= maxSources && !f.sweep(now) {
			f.untracked++
			return false, false
		}
		w = &window{start: now}
		f.sources[key] = w
	}
	if now.Sub(w.start) >= f.window {
		*w = window{start: now}
	}
	w.count++
	if w.count >= f.limit && !now.Before(w.blocked) {
		w.blocked = w.start.Add(f.window)
		if w.blocked.Sub(now) < time.Second {
			w.blocked = now.Add(time.Second)
		}
	}
	return w.count >= f.limit, w.count > f.limit
}

// sweep drops the addresses whose window and refusal are over, at most
// once a second (a sweep walks the whole table); it reports whether there
// is room.
func (f *Failures) sweep(now time.Time) bool {
	if now.Sub(f.swept) < time.Second {
		return false
	}
	f.swept = now
	for k, w := range f.sources {
		if now.Sub(w.start) >= f.window && !now.Before(w.blocked) {
			delete(f.sources, k)
		}
	}
	return len(f.sources) < maxSources
}

// FailureStats are the addresses tracked and those refused now, and the
// failures that could not be tracked because the table was full.
type FailureStats struct {
	Tracked, Refused int
	Untracked        uint64
}

// Stats returns the table's counts.
func (f *Failures) Stats() FailureStats {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FailureStats{Tracked: len(f.sources), Untracked: f.untracked}
	for _, w := range f.sources {
		if now.Before(w.blocked) {
			st.Refused++
		}
	}
	return st
}
