package batch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
)

// Claims is this copy's reading of the claims log (pkg/claimlog.Log).
type Claims interface {
	Decision(tag string) (claimlog.Entry, bool)
	WaitDecision(ctx context.Context, tag string) (claimlog.Entry, error)
	CaughtUp() bool
	Free(ctx context.Context, tag string, ids []string) error
}

// A keyed envelope tagged with the claims log entry of its requests
// (bus.ClaimTagHeader: ingest-api published it with the entry, before the
// entry was decided) carries the events of every request in the entry,
// retries included. The writer reads the log as every ingest-api copy
// does, and stores only the events of the requests the entry holds. What
// it knows of the entry is its state, and what it does with each event is
// its verdict.
type entryState uint8

const (
	entryRead entryState = iota // decided (kept as long as the stream keeps the entry)
	entryWait                   // not read yet: the envelope comes back (settle.NotReady)
	entryGone                   // not read, given up: never written, or older than what the reading keeps
)

type verdict uint8

const (
	// keep: the entry holds its claim (or the envelope is not tagged, or
	// an operator's replay of a dead letter whose entry is gone): stored
	// as any keyed event, the record's checks included.
	keep verdict = iota
	// release: an earlier entry holds its claim (a retry while the first
	// attempt is in flight): nothing is stored, recorded or answered, and
	// the claim is released once the envelope is acked. No reader judged
	// this entry to hold it (readers agree or cannot tell), so no writer
	// stores it.
	release
	// drop: this reading cannot tell (an entry from before what it
	// keeps), on a first delivery: nothing is stored, recorded or
	// answered, and the claim is not released (a writer that can tell may
	// judge it held: its retries wait until it expires).
	drop
	// ifStored: this reading cannot tell, or gave the entry up, and an
	// earlier delivery may have stored it: answered only if it is found
	// stored or recorded, else dropped without a release.
	ifStored
)

// verdictNames label writer_worker_claim_verdicts_total.
var verdictNames = [...]string{"keep", "release", "drop", "if_stored"}

// decideWait bounds a flush's wait for the entries its envelopes are tagged
// with, on their first delivery: the entry is sent before the events, which
// reach the writer through the mapper, so it is nearly always read by then
// (the whole flush waits: unkeyed envelopes too).
const decideWait = 200 * time.Millisecond

// entryTries is how many deliveries of an envelope whose entry is not read
// (settle.NotReady brings it back 1 s apart) come before the entry is given
// up, once the reading is caught up: counted in deliveries, not by a clock that
// ingest-api's may be ahead of. An entry is sent before its events, and
// ingest-api waits OUTCOME_TIMEOUT (5 s) for its answer: one not stored by
// then is not stored later. It bounds what a claims log that cannot be
// written (its stream without a leader) holds back in the writers'
// consumer: the keyed envelopes of about 10 s.
const entryTries = 10

// entryOf is what this copy knows of the entry tagged tag, of an envelope
// delivered that often; decideBy bounds the wait of a first delivery.
func (w *Writer) entryOf(decideBy func() context.Context, tag string, delivered uint64) (claimlog.Entry, entryState) {
	if e, ok := w.claims.Decision(tag); ok {
		return e, entryRead
	}
	if delivered == 1 {
		if e, err := w.claims.WaitDecision(decideBy(), tag); err == nil {
			return e, entryRead
		}
	}
	if !w.claims.CaughtUp() || delivered <= entryTries {
		// The reading has not come to where the log stood when it
		// started (this copy just started, or reads the log again):
		// the entry may be in what it has yet to read.
		return claimlog.Entry{}, entryWait
	}
	return claimlog.Entry{}, entryGone
}

// verdictOf is the verdict on ev, of an envelope tagged with the entry e
// in state st, check when an earlier delivery may have stored it
// (dedupe.Item.Check).
func verdictOf(e claimlog.Entry, st entryState, ev *event.Mapped, check bool) verdict {
	if st == entryRead {
		switch e.Of(event.ClaimID(ev.ID, ev.Group)) {
		case claimlog.Held:
			return keep
		case claimlog.Blocked:
			return release
		}
	}
	switch {
	case ev.Replay:
		// An operator's replay of a dead letter: its first attempt was
		// answered "failed to store" (the record says so), and this one
		// may store, as before the writers decided.
		return keep
	case st != entryRead || check:
		return ifStored
	}
	return drop
}

// judge applies the verdict v on it, of src: false when it is dropped.
func (w *Writer) judge(src *source, it *dedupe.Item, v verdict) bool {
	w.m.verdicts[v].Inc()
	switch v {
	case release:
		if id := event.ClaimID(it.Event.ID, it.Event.Group); !slices.Contains(src.free, id) {
			src.free = append(src.free, id)
		}
		return false
	case drop:
		return false
	case ifStored:
		it.IfStored = true
	}
	return true
}

// waitBudget is a flush's decideWait, started by its first wait.
type waitBudget struct{ c context.Context }

func (b *waitBudget) ctx() context.Context {
	if b.c == nil {
		var cancel context.CancelFunc
		b.c, cancel = context.WithTimeout(context.Background(), decideWait)
		time.AfterFunc(decideWait, cancel)
	}
	return b.c
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
	// closing is set by close: what is queued after closeWait is left.
	closing atomic.Pointer[time.Time]
}

const (
	freeQueue = 1024
	closeWait = 2 * time.Second
)

func newFreer(claims Claims, log *zap.Logger) *freer {
	f := &freer{claims: claims, log: log, queue: make(chan freeing, freeQueue)}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		left := 0
		for fr := range f.queue {
			if at := f.closing.Load(); at != nil && time.Since(*at) > closeWait {
				left++
				continue
			}
			if err := claims.Free(context.Background(), fr.tag, fr.ids); err != nil {
				log.Warn("claims of dropped events not released: their retries wait for the pipeline window", zap.Int("claims", len(fr.ids)), zap.Error(err))
			}
		}
		if left > 0 {
			log.Warn("claims of dropped events not released at shutdown: their retries wait for the pipeline window", zap.Int("releases", left))
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

// close writes what is queued, for closeWait at most, and returns.
func (f *freer) close() {
	now := time.Now()
	f.closing.Store(&now)
	close(f.queue)
	f.done.Wait()
}
