package guard

import (
	"net/netip"
	"sync"
	"time"
)

// maxSources bounds the keys each table of Failures remembers (about 64
// bytes each).
const maxSources = 1 << 16

// ranges are the keys a failure counts under, finest first: the address
// (an IPv6 one by its /64, as Source), then its /24 or /48, its /16 or
// /32, and last its /8 or /16. A failure counts under the finest whose
// table has room, so that an attack spread over more sources than a table
// holds is limited by the ranges it comes from instead of going
// uncounted. The last table cannot fill: there are 256 IPv4 /8s and 65,536
// IPv6 /16s. A device that shares a range with an attacker is refused with
// it while the attack lasts; the lockout fails closed, never open.
var ranges = [...]struct{ v4, v6 int }{{32, 64}, {24, 48}, {16, 32}, {8, 16}}

// Failures counts failed authentications per client address and refuses
// an address that had too many: AuthFailures in a window of AuthWindow,
// then refused until the window ends. The device an attacker guesses at
// is not locked: it posts from its own address.
type Failures struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu        sync.RWMutex                          // every request reads; only failures write
	tables    [len(ranges)]map[netip.Prefix]*window // by ranges
	swept     [len(ranges)]time.Time
	untracked uint64 // failures counted under a range wider than the address
}

type window struct {
	start   time.Time
	count   int
	blocked time.Time // refused until then
}

// NewFailures allows limit failures per window and address. A nil
// *Failures refuses nobody.
func NewFailures(limit int, per time.Duration) *Failures {
	f := &Failures{limit: limit, window: per, now: time.Now}
	for i := range f.tables {
		f.tables[i] = make(map[netip.Prefix]*window)
	}
	return f
}

// rangeOf is the key of address a in table i.
func rangeOf(a netip.Addr, i int) netip.Prefix {
	bits := ranges[i].v4
	if a.Is6() {
		bits = ranges[i].v6
	}
	p, _ := a.Prefix(bits)
	return p
}

// Refused reports whether the address a is refused now, under its own key
// or a range of it, and for how long more.
func (f *Failures) Refused(a netip.Addr) (time.Duration, bool) {
	if f == nil {
		return 0, false
	}
	now := f.now()
	f.mu.RLock()
	defer f.mu.RUnlock()
	var wait time.Duration
	for i, t := range f.tables {
		if len(t) == 0 {
			continue
		}
		if w := t[rangeOf(a, i)]; w != nil && now.Before(w.blocked) {
			wait = max(wait, w.blocked.Sub(now))
		}
	}
	return wait, wait > 0
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
	f.mu.Lock()
	defer f.mu.Unlock()
	w, level := f.windowOf(a, now)
	if level > 0 {
		f.untracked++
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

// windowOf is the window a's failure counts in, and the index of its
// table in ranges: the finest key already tracked, else a new one in the
// finest table with room.
func (f *Failures) windowOf(a netip.Addr, now time.Time) (*window, int) {
	for i, t := range f.tables {
		if w := t[rangeOf(a, i)]; w != nil {
			return w, i
		}
	}
	i := 0
	for i < len(f.tables)-1 && len(f.tables[i]) >= maxSources && !f.sweep(i, now) {
		i++
	}
	w := &window{start: now}
	f.tables[i][rangeOf(a, i)] = w
	return w, i
}

// sweep drops table i's keys whose window and refusal are over, at most
// once a second (a sweep walks the whole table); it reports whether there
// is room.
func (f *Failures) sweep(i int, now time.Time) bool {
	if now.Sub(f.swept[i]) < time.Second {
		return false
	}
	f.swept[i] = now
	for k, w := range f.tables[i] {
		if now.Sub(w.start) >= f.window && !now.Before(w.blocked) {
			delete(f.tables[i], k)
		}
	}
	return len(f.tables[i]) < maxSources
}

// FailureStats are the keys tracked (addresses and ranges) and those
// refused now, and the failures counted under a range wider than their
// address because the finer tables were full.
type FailureStats struct {
	Tracked, Refused int
	Untracked        uint64
}

// Stats returns the tables' counts.
func (f *Failures) Stats() FailureStats {
	now := f.now()
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := FailureStats{Untracked: f.untracked}
	for _, t := range f.tables {
		st.Tracked += len(t)
		for _, w := range t {
			if now.Before(w.blocked) {
				st.Refused++
			}
		}
	}
	return st
}
