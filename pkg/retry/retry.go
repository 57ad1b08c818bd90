// Package retry is how every program tries work again: exponential back-off
// with full jitter, capped, within a number of tries, a maximum elapsed time
// and the context's deadline. Whether to try again is the error's kind
// (pkg/failure): a permanent error ends at once, a throttled one waits as
// long as it says (and no less than the back-off), a transient one backs
// off. What is redelivered through JetStream is decided by pkg/settle's
// table, which takes its delays from here.
package retry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/devicehub/eventservice/pkg/failure"
)

// Backoff is a retry schedule. The wait before try n+1 is drawn uniformly
// from [0, min(Max, Initial*2^(n-1))] ("full jitter": copies that failed
// together do not come back together).
type Backoff struct {
	Initial, Max time.Duration
	// Tries bounds the calls of Do (0: no bound); MaxElapsed bounds the
	// time from Do's start to its last try (0: no bound but the context).
	Tries      int
	MaxElapsed time.Duration
}

// Cap is the longest wait after n failed tries (n >= 1).
func (b Backoff) Cap(n int) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Delay is the wait after n failed tries: drawn from [0, Cap(n)].
func (b Backoff) Delay(n int) time.Duration {
	c := b.Cap(n)
	if c <= 0 {
		return 0
	}
	return rand.N(c + 1)
}

// Do calls op until it succeeds, fails permanently, or the tries, the
// elapsed time or ctx run out, and returns op's last error (ctx's error
// when ctx ended before op was tried). failed, if not nil, hears of each
// failure that will be tried again, and the wait before it. A wait that
// would end past ctx's deadline or MaxElapsed is not waited: Do returns.
func (b Backoff) Do(ctx context.Context, op func(ctx context.Context) error, failed func(try int, err error, wait time.Duration)) error {
	start := time.Now()
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := op(ctx)
		if err == nil || failure.KindOf(err) == failure.Permanent || (b.Tries > 0 && try >= b.Tries) {
			return err
		}
		wait := max(b.Delay(try), failure.WaitOf(err))
		if end, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(end) {
			return err
		}
		if b.MaxElapsed > 0 && time.Since(start)+wait > b.MaxElapsed {
			return err
		}
		if failed != nil {
			failed(try, err, wait)
		}
		if !Sleep(ctx, wait) {
			return err
		}
	}
}

// Loop runs op until ctx ends, again after each return, waiting Delay(n)
// before the next run: n counts the returns since a run last lasted longer
// than Max (one that ran well a while starts the back-off over). failed,
// if not nil, hears of each return before the wait. It is for work that
// runs as long as its program (a feed followed), not for one operation.
func (b Backoff) Loop(ctx context.Context, op func(ctx context.Context) error, failed func(err error)) {
	for n := 1; ; n++ {
		start := time.Now()
		err := op(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > b.Max {
			n = 1
		}
		if failed != nil {
			failed(err)
		}
		if !Sleep(ctx, b.Delay(n)) {
			return
		}
	}
}

// Sleep waits d or until ctx ends, and reports whether it waited d.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
