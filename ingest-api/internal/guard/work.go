package guard

import (
	"context"
	"runtime"
	"time"
)

// workWait is the longest a request waits for a work slot before it is
// answered 503.
const workWait = time.Second

// Work bounds the requests doing costly work before they have
// authenticated, sized from GOMAXPROCS (as VictoriaMetrics sizes its
// concurrency limiter) rather than by a setting.
type Work struct{ slots chan struct{} }

// NewWork sizes the bound for this process: half the cores (at least
// one) may do costly work before authentication (inflate, parse a large
// body), so that a burst of it leaves the other half to the cheap, honest
// requests.
func NewWork() *Work { return &Work{slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))} }

// Take waits for a slot, up to workWait or the end of ctx; done gives it
// back. A nil *Work never waits.
func (w *Work) Take(ctx context.Context) (done func(), ok bool) {
	if w == nil {
		return func() {}, true
	}
	select {
	case w.slots <- struct{}{}:
		return w.give, true
	default:
	}
	t := time.NewTimer(workWait)
	defer t.Stop()
	select {
	case w.slots <- struct{}{}:
		return w.give, true
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, false
}

func (w *Work) give() { <-w.slots }
