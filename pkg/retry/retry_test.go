package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/failure"
)

func TestDelayIsJitteredUnderTheCap(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 40: time.Second} {
		if c := b.Cap(n); c != want {
			t.Errorf("Cap(%d) = %v, want %v", n, c, want)
		}
		seen := map[time.Duration]bool{}
		var lo, hi time.Duration = want, 0
		for range 2000 {
			d := b.Delay(n)
			if d < 0 || d > want {
				t.Fatalf("Delay(%d) = %v, want within [0, %v]", n, d, want)
			}
			seen[d] = true
			lo, hi = min(lo, d), max(hi, d)
		}
		// Full jitter: the draws cover the range, not one point.
		if len(seen) < 1000 || lo > want/10 || hi < want*9/10 {
			t.Errorf("Delay(%d): %d distinct waits in [%v, %v], want spread over [0, %v]", n, len(seen), lo, hi, want)
		}
	}
}

func TestDoStopsAtSuccessPermanentAndTries(t *testing.T) {
	b := Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Tries: 4}
	calls := 0
	err := b.Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("reset")
		}
		return nil
	}, nil)
	if err != nil || calls != 3 {
		t.Errorf("transient twice then success: %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	perm := failure.AsPermanent(errors.New("rejected"))
	if err := b.Do(context.Background(), func(context.Context) error { calls++; return perm }, nil); !errors.Is(err, perm) || calls != 1 {
		t.Errorf("permanent: %v after %d calls, want it after 1", err, calls)
	}
	calls = 0
	var heard []int
	err = b.Do(context.Background(), func(context.Context) error { calls++; return errors.New("reset") },
		func(try int, _ error, wait time.Duration) {
			heard = append(heard, try)
			if wait > b.Cap(try) {
				t.Errorf("wait %v after try %d over the cap %v", wait, try, b.Cap(try))
			}
		})
	if err == nil || calls != 4 || len(heard) != 3 {
		t.Errorf("always failing: %v after %d calls (%d failures heard), want an error after 4 (3 heard)", err, calls, len(heard))
	}
}

func TestDoHonoursThrottlingAndDeadlines(t *testing.T) {
	b := Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	calls := 0
	start := time.Now()
	err := b.Do(context.Background(), func(context.Context) error {
		calls++
		if calls == 1 {
			return failure.AsThrottled(errors.New("slow down"), 150*time.Millisecond)
		}
		return nil
	}, nil)
	if took := time.Since(start); err != nil || took < 150*time.Millisecond {
		t.Errorf("throttled for 150ms: %v after %v, want success after >= 150ms", err, took)
	}

	// A wait past the context's deadline is not waited.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start, calls = time.Now(), 0
	err = b.Do(ctx, func(context.Context) error {
		calls++
		return failure.AsThrottled(errors.New("come back in an hour"), time.Hour)
	}, nil)
	if took := time.Since(start); err == nil || calls != 1 || took > 50*time.Millisecond {
		t.Errorf("throttled past the deadline: %v after %d calls and %v, want the error at once", err, calls, took)
	}

	// MaxElapsed bounds the whole.
	b = Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, MaxElapsed: 200 * time.Millisecond}
	start = time.Now()
	err = b.Do(context.Background(), func(context.Context) error { return errors.New("down") }, nil)
	if took := time.Since(start); err == nil || took > 400*time.Millisecond {
		t.Errorf("MaxElapsed 200ms: %v after %v", err, took)
	}

	// A context ended before the first try: op is not called.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	calls = 0
	if err := b.Do(done, func(context.Context) error { calls++; return nil }, nil); !errors.Is(err, context.Canceled) || calls != 0 {
		t.Errorf("ended context: %v after %d calls", err, calls)
	}
}

// Loop runs op again after each return, backing off while runs are short
// and starting over after one that lasted longer than Max, until ctx ends.
func TestLoopRunsUntilTheContextEnds(t *testing.T) {
	b := Backoff{Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	runs, heard := 0, 0
	b.Loop(ctx, func(ctx context.Context) error {
		runs++
		if runs == 3 {
			time.Sleep(50 * time.Millisecond) // lasted longer than Max
		}
		if runs == 5 {
			cancel()
		}
		return errors.New("feed broke")
	}, func(err error) {
		if err == nil || err.Error() != "feed broke" {
			t.Errorf("heard %v", err)
		}
		heard++
	})
	if runs != 5 || heard != 4 {
		t.Fatalf("%d runs, %d failures heard; want 5 and 4 (the last run ended by the context)", runs, heard)
	}
}
