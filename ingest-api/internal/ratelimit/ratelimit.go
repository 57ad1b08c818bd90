// Package ratelimit bounds how often each device may post: a token bucket per
// serial, kept only for devices that authenticated, so the table is bounded
// by the registry and no stranger can grow it, and only while it is not
// full (a full bucket is what a new one is): devices deleted on another
// copy, or silent, do not stay in it. Copies of ingest-api share
// what they granted (share.go), so that a device is held to its rate
// across them.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter holds one bucket per device serial.
type Limiter struct {
	perSecond rate.Limit
	burst     int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	sweepAt int            // the number of buckets at which the full ones are dropped
	granted map[string]int // readings granted since the last share; nil: not shared
}

// minSweep is the fewest buckets swept: sweeps cost O(1) a new bucket.
const minSweep = 1024

// New allows perSecond readings per device with bursts of burst; perSecond
// of zero or less turns limiting off.
func New(perSecond float64, burst int) *Limiter {
	return &Limiter{perSecond: rate.Limit(perSecond), burst: burst, buckets: make(map[string]*rate.Limiter)}
}

// AllowN reports whether serial may post n readings now, taking n tokens
// if so: a backlog costs what its messages would cost one by one, up to
// the whole burst (a backlog larger than the burst waits for a full
// bucket). When it may not, wait is when it may.
func (l *Limiter) AllowN(serial string, n int) (ok bool, wait time.Duration) {
	if l == nil || l.perSecond <= 0 {
		return true, 0
	}
	now, take := time.Now(), min(n, l.burst)
	b := l.bucket(serial)
	// The bucket has a lock of its own: devices do not wait on each other.
	// A grant takes no reservation (which the heap would hold); a refusal
	// reserves to learn the wait, and gives the tokens back.
	if !b.AllowN(now, take) {
		r := b.ReserveN(now, take)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return false, d
		}
		// Refilled since: the reservation is the grant.
	}
	l.mu.Lock()
	if l.granted != nil {
		l.granted[serial] += n
	}
	l.mu.Unlock()
	return true, 0
}

// bucket returns serial's bucket, made full if it is new.
func (l *Limiter) bucket(serial string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[serial]
	if !ok {
		if len(l.buckets) >= l.sweepAt {
			l.sweep(time.Now())
		}
		b = rate.NewLimiter(l.perSecond, l.burst)
		l.buckets[serial] = b
	}
	return b
}

// sweep drops the buckets that are full: a device's next request makes
// it a new one, full, which is the same. (A request that took its bucket
// just before may spend its tokens on the dropped one: at most one
// request's readings are not counted.) l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	for serial, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, serial)
		}
	}
	l.sweepAt = max(2*len(l.buckets), minSweep)
}

// debit takes n readings another copy granted from serial's bucket, into
// debt if need be: this copy then waits them out.
func (l *Limiter) debit(serial string, n int) {
	l.bucket(serial).ReserveN(time.Now(), min(n, l.burst))
}

// Forget drops the bucket of a device that was deleted.
func (l *Limiter) Forget(serial string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.buckets, serial)
	l.mu.Unlock()
}
