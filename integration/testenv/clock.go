package testenv

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// StepClock steps this machine's wall clock by d (CLOCK_REALTIME, as an
// NTP step or a VM resumed from a snapshot does it) and returns the step
// back by -d; the test's cleanup steps it back if the test did not. Every
// process on the machine sees the step at once (one kernel, one clock):
// Go programs read the clock through the vDSO, so no per-process fake
// (libfaketime) reaches them. Durations measured by Go's monotonic clock
// (timers, time.Since) do not move. Needs root; only `make partition`
// runs it, never beside other tests.
func StepClock(t testing.TB, d time.Duration) (back func()) {
	t.Helper()
	if err := step(d); err != nil {
		t.Fatalf("step the clock by %s: %v", d, err)
	}
	t.Logf("the wall clock stepped by %s: now %s", d, time.Now().Round(0).UTC().Format(time.RFC3339))
	var once sync.Once
	back = func() {
		once.Do(func() {
			if err := step(-d); err != nil {
				t.Errorf("step the clock back by %s: %v (set it by hand)", -d, err)
				return
			}
			t.Logf("the wall clock stepped back by %s: now %s", -d, time.Now().Round(0).UTC().Format(time.RFC3339))
		})
	}
	t.Cleanup(back)
	return back
}

func step(d time.Duration) error {
	tv := syscall.NsecToTimeval(time.Now().Add(d).UnixNano())
	return syscall.Settimeofday(&tv)
}
