package guard

import (
	"context"
	"runtime"
	"time"
)

// workPerCore is how many requests may do costly work (inflate, parse a
// large body) at once per core: enough to keep the cores busy, few enough
// that a burst of costly requests leaves the scheduler's queue short for
// the cheap, honest ones behind them.
const workPerCore = 2

// workWait is the longest a request waits for a work slot before it is
// answered 503.
const workWait = time.Second

// Work bounds the requests doing costly work before they have
// authenticated, sized from GOMAXPROCS (as VictoriaMetrics sizes its
// concurrency limiter) rather than by a setting.
type Work struct{ slots chan struct{} }

// NewWork sizes the bound for this process.
func NewWork() *Work { return &Work{slots: make(chan struct{}, workPerCore*runtime.GOMAXPROCS(0))} }

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

// Busy is the slots taken now.
func (w *Work) Busy() int { return len(w.slots) }
