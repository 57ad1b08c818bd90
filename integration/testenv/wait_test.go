package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalT records the first Fatalf and stops the goroutine, as testing.T
// does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs wait and returns what it failed with ("" if it did not).
func failure(wait func(t testing.TB)) string {
	f := &fatalT{}
	done := make(chan struct{})
	go func() { defer close(done); wait(f) }()
	<-done
	return f.msg
}

// A wait goes on past its stall as long as there is progress, fails
// after a stall without any, and at once when what it waits on died.
func TestWaitForFollowsProgress(t *testing.T) {
	const stall = 200 * time.Millisecond
	start := time.Now()
	elapsed := func() string { return time.Since(start).Round(stall / 4).String() }
	if msg := failure(func(t testing.TB) {
		WaitFor(t, "slow but moving", stall, elapsed, nil, func() bool { return time.Since(start) > 5*stall })
	}); msg != "" {
		t.Fatalf("a wait with progress failed: %s", msg)
	}

	start = time.Now()
	msg := failure(func(t testing.TB) {
		WaitFor(t, "stuck", stall, func() string { return "the same" }, nil, func() bool { return false })
	})
	if took := time.Since(start); !strings.Contains(msg, "stuck: no progress for 200ms") || took < stall {
		t.Fatalf("a wait without progress: %q after %v, want it to fail after %v", msg, took, stall)
	}

	start = time.Now()
	msg = failure(func(t testing.TB) {
		WaitFor(t, "dead", time.Minute, elapsed, func() string { return "writer exited" }, func() bool { return false })
	})
	if took := time.Since(start); msg != "dead: writer exited" || took > 30*time.Second {
		t.Fatalf("a wait on a dead program: %q after %v, want it to fail at once", msg, took)
	}
}
