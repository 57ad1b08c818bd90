package workspace

import (
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Workspace reads are bounded three times: half the cores at once (a page
// of messages may be ~4 MiB to pass on, and a writer renders it);
// readBytesPerSec of answers per copy on average (readBurst at once); and
// readShare of each second's time per copy (readTimeBurst at once), the
// time a read takes counted from its turn to its answer's first byte
// (readTimeMax at most), which covers what it cost in writer-worker and
// ClickHouse: a client that reads large pages
// in a loop, whatever its role, gets them at that pace, and ingestion keeps
// the rest of the machine. Measured: a 3.5 MB page of messages costs ~100 ms
// of CPU in writer-worker and ingest-api and takes 2-3 s in all on a busy
// machine (ClickHouse reads every payload's length); paced by bytes alone a
// loop of them held the one read slot without a break and raised the
// fleet's p99 from 92 to 308 ms (make chaos, workspace-read-flood).
const (
	readBytesPerSec = 4 << 20
	readBurst       = 8 << 20
	readShare       = 0.25
	readTimeBurst   = 2 // seconds
	// readTimeMax is the most one read is charged: the writer's answer is
	// waited for 5 s (ingest-api's workspace read wait).
	readTimeMax = 5 * time.Second
	// A read waits up to readWait for one of the slots, then up to
	// paceWait for the bytes and time before it to be paid for (holding
	// its slot), or is answered 503 with a Retry-After: a client paging
	// through large pages gets them at the budgets' pace, a flood is
	// refused.
	readWait = time.Second
	paceWait = 5 * time.Second
)

// boundReads applies both bounds to GET requests; writes pass.
func (s *Server) boundReads(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().Method != http.MethodGet {
			return next(c)
		}
		t := time.NewTimer(readWait)
		defer t.Stop()
		select {
		case s.reads <- struct{}{}:
			defer func() { <-s.reads }()
		case <-t.C:
			return s.busy(c, time.Second)
		case <-c.Request().Context().Done():
			return nil
		}
		now := time.Now()
		if wait := max(s.readBytes.wait(now), s.readTime.wait(now)); wait > 0 {
			if wait > paceWait {
				return s.busy(c, wait)
			}
			if !retry.Sleep(c.Request().Context(), wait) {
				return nil
			}
		}
		// A read's time runs to its answer's first byte: a client that
		// reads the answer slowly costs its connection, not the machine.
		start := time.Now()
		var answered time.Time
		c.Response().Before(func() { answered = time.Now() })
		err := next(c)
		end := time.Now()
		if answered.IsZero() {
			answered = end
		}
		s.readBytes.spend(end, float64(c.Response().Size))
		s.readTime.spend(end, min(answered.Sub(start), readTimeMax).Seconds())
		return err
	}
}

// busy answers a read that cannot have its turn in time: 503 and a
// Retry-After of at least wait.
func (s *Server) busy(c echo.Context, wait time.Duration) error {
	edge.RetryAfter(c, wait)
	return s.respond(c, outcome.Overloaded, "", "", "too many workspace reads at once, retry later")
}

// paceBudget is a bucket (of bytes, or of seconds) that refills at rate per
// second up to burst, and may be spent into debt: a read's size and time
// are known only after it.
type paceBudget struct {
	rate, burst float64

	mu    sync.Mutex
	level float64
	at    time.Time
}

func newPaceBudget(rate, burst float64) *paceBudget {
	return &paceBudget{rate: rate, burst: burst, level: burst}
}

func (b *paceBudget) refill(now time.Time) {
	if !b.at.IsZero() {
		b.level = min(b.burst, b.level+now.Sub(b.at).Seconds()*b.rate)
	}
	b.at = now
}

// wait is how long until the budget is out of debt.
func (b *paceBudget) wait(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.level >= 0 {
		return 0
	}
	return time.Duration(-b.level / b.rate * float64(time.Second))
}

// spend takes n from the budget.
func (b *paceBudget) spend(now time.Time, n float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level -= n
}
