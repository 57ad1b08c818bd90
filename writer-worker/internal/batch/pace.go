package batch

import "time"

// pacer decides when the next value insert starts. ClickHouse's cost is per
// insert far more than per row, so inserts are spaced: after a batch of n
// events the next starts interval(n) = max(MinInterval, min(n*PacePerEvent,
// MaxInterval)) after it, never sooner than MinInterval. It starts sooner
// than interval(n), though, once as many events are waiting as the last
// batch held: clients that send their next reading when the last one is
// answered (firmware emptying its buffer) are all back, and waiting longer
// would only add latency. An idle writer inserts at once.
type pacer struct {
	min, per, max time.Duration
	start         time.Time // of the last insert; zero before the first
	last          int       // events in it
}

// due reports whether an insert with pending events waiting should start at
// now; if not, wait is how long until it should at the latest.
func (p *pacer) due(now time.Time, pending int) (bool, time.Duration) {
	if p.start.IsZero() {
		return true, 0
	}
	if floor := p.start.Add(p.min); now.Before(floor) {
		return false, floor.Sub(now)
	}
	if pending >= p.last {
		return true, 0
	}
	next := p.start.Add(max(p.min, min(time.Duration(p.last)*p.per, p.max)))
	if !now.Before(next) {
		return true, 0
	}
	return false, next.Sub(now)
}

// started notes an insert of events that started at start.
func (p *pacer) started(start time.Time, events int) { p.start, p.last = start, events }
