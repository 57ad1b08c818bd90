package testenv

import (
	"testing"
	"time"
)

// Waiting on a busy machine. A fixed deadline ("ready within 30s") fails
// whenever the machine is slower than whoever chose it: on a shared 2-core
// machine with a core kept busy, starting a stack took over 30 s. WaitFor
// has no fixed deadline: it waits while the programs waited on progress
// (log, use CPU, answer differently), fails at once when one of them died,
// and otherwise only after a stall without any progress or WaitCeiling in
// all (a program that keeps running but never gets there).

const (
	// WaitStall is how long a wait goes on without any progress, unless
	// told otherwise.
	WaitStall = 30 * time.Second
	// WaitCeiling bounds any wait, progress or not.
	WaitCeiling = 3 * time.Minute
	// pollEvery is how often the condition is checked, and progress
	// (which may read /proc) once every sampleEvery (or a quarter of the
	// stall, if shorter).
	pollEvery   = 20 * time.Millisecond
	sampleEvery = time.Second
)

// WaitFor polls cond until it holds. progress says where things stand (a
// count, a size, an answer's text): while it changes the wait goes on;
// after stall without a change, or WaitCeiling in all, the test fails
// with what and the last progress. dead, if not nil, names a reason to
// stop at once ("" while there is none).
func WaitFor(t testing.TB, what string, stall time.Duration, progress, dead func() string, cond func() bool) {
	t.Helper()
	start := time.Now()
	last, since, sampled := progress(), start, start
	every := min(sampleEvery, stall/4)
	for !cond() {
		now := time.Now()
		// Sampled before any verdict too: cond itself may have taken long.
		if now.Sub(sampled) >= every || now.Sub(since) > stall {
			sampled = now
			if dead != nil {
				if why := dead(); why != "" {
					t.Fatalf("%s: %s", what, why)
				}
			}
			if p := progress(); p != last {
				last, since = p, now
			}
		}
		switch {
		case now.Sub(since) > stall:
			t.Fatalf("%s: no progress for %v (waited %v; %s)", what, stall, now.Sub(start).Round(time.Second), last)
		case now.Sub(start) > max(WaitCeiling, stall):
			t.Fatalf("%s: not within %v, though progressing (%s)", what, max(WaitCeiling, stall), last)
		}
		time.Sleep(pollEvery)
	}
}
