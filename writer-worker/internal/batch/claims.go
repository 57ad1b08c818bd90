package batch

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
)

// Claims is this copy's reading of the claims log (pkg/claimlog.Log).
type Claims interface {
	WaitDecision(ctx context.Context, tag string) (claimlog.Entry, error)
	Free(ctx context.Context, tag string, ids []string) error
}

// A keyed envelope tagged with the claims log entry of its requests
// (bus.ClaimTagHeader: ingest-api published it with the entry, before the
// entry was decided) carries the events of every request in the entry,
// retries included. The writer reads the log as every ingest-api copy
// does, and stores only the events of the requests the entry holds. What
// it does with each event is its verdict:
type verdict uint8

const (
	// keep: the entry holds its claim (or the envelope is not tagged):
	// stored as any keyed event.
	keep verdict = iota
	// drop: the entry does not hold its claim (an earlier attempt's
	// does, or this reading cannot tell), and no delivery before this one
	// can have stored it: nothing is stored, recorded or answered, and
	// the claim is released (freed) once the envelope is acked.
	drop
	// ifStored: this reading cannot tell (or never read the entry), and
	// an earlier delivery, by a writer that could, may have stored it:
	// answered only if it is found stored (or recorded), else dropped
	// without releasing its claim.
	ifStored
)

// decideWait bounds a flush's wait for the entries its envelopes are tagged
// with: the entry is written before the events, which reach the writer
// through the mapper, so it is nearly always read by then.
const decideWait = 500 * time.Millisecond

// entryLate is how long after its events were received an entry not read
// is given up: the envelope comes back (settle.NotReady) until then, and
// is decided without it after (its events are stored only if found
// stored: ingest-api answered their requests 503 at OUTCOME_TIMEOUT). An
// entry is written before its events, and ingest-api waits OUTCOME_TIMEOUT
// (5 s) for its answer: one not stored by twice that never will be. It
// bounds what a claims log that cannot be written (its stream without a
// leader) holds back in the writers' consumer: the keyed envelopes of 10 s.
const entryLate = 10 * time.Second

// verdictOf is the verdict on ev, in an envelope tagged with the entry e
// (read: the entry was read), check when an earlier delivery may have
// stored it (dedupe.Item.Check).
func verdictOf(e claimlog.Entry, read bool, ev *event.Mapped, check bool) verdict {
	if !read {
		return ifStored
	}
	switch e.Of(event.ClaimID(ev.ID, ev.Group)) {
	case claimlog.Held:
		return keep
	case claimlog.Blocked:
		// An earlier entry holds it: no reader judged this one to hold
		// it (readers agree or cannot tell), so nothing of it was
		// stored.
		return drop
	}
	if check {
		return ifStored
	}
	return drop
}

// entry is what the claims log entry tagged tag holds, waiting for this
// copy's reading until ctx ends; false: not read.
func (w *Writer) entry(ctx context.Context, tag string) (claimlog.Entry, bool) {
	e, err := w.claims.WaitDecision(ctx, tag)
	return e, err == nil
}

// freeClaims releases the claims src's dropped events were under.
func (w *Writer) freeClaims(src source) {
	if len(src.free) > 0 {
		w.frees.add(freeing{tag: src.tag, ids: src.free})
	}
}

// freeing is the release of claims an entry does not hold: its tag and the
// claim ids.
type freeing struct {
	tag string
	ids []string
}

// freer writes the releases of the claims the writer dropped events of,
// from a goroutine of its own, at most freeQueue waiting: one not written
// leaves its claim standing for the pipeline window (its retries wait).
type freer struct {
	claims Claims
	log    *zap.Logger
	queue  chan freeing
	done   sync.WaitGroup
}

const freeQueue = 1024

func newFreer(claims Claims, log *zap.Logger) *freer {
	f := &freer{claims: claims, log: log, queue: make(chan freeing, freeQueue)}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		for fr := range f.queue {
			if err := claims.Free(context.Background(), fr.tag, fr.ids); err != nil {
				log.Warn("claims of dropped events not released: their retries wait for the pipeline window", zap.Int("claims", len(fr.ids)), zap.Error(err))
			}
		}
	}()
	return f
}

// add queues fr; false when the queue is full.
func (f *freer) add(fr freeing) bool {
	select {
	case f.queue <- fr:
		return true
	default:
		f.log.Warn("claims of dropped events not released (too many waiting): their retries wait for the pipeline window", zap.Int("claims", len(fr.ids)))
		return false
	}
}

// close writes what is queued and returns.
func (f *freer) close() {
	close(f.queue)
	f.done.Wait()
}
