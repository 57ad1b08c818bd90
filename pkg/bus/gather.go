package bus

import "time"

// Gather appends to batch whatever in holds right now, up to max, waiting at
// most linger for more (zero: not at all). It returns early when in closes.
// Both workers batch this way: a batch is whatever arrived while the previous
// one was being handled, so batches grow with load without delaying an idle
// system.
func Gather[T any](in <-chan T, batch []T, max int, linger time.Duration) []T {
	var timeout <-chan time.Time
	if linger > 0 {
		t := time.NewTimer(linger)
		defer t.Stop()
		timeout = t.C
	}
	for len(batch) < max {
		select {
		case m, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, m)
			continue
		default:
		}
		if timeout == nil {
			return batch
		}
		select {
		case m, ok := <-in:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		case <-timeout:
			return batch
		}
	}
	return batch
}
