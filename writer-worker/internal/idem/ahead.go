package idem

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Lookups asked ahead. When an envelope reaches this writer, the outcomes
// of its keyed events are asked for at once (Ahead), while the batch it
// joins waits for the insert before it and the pause after; by the time the
// batch is checked (Lookup), the answer is there. One query runs at a
// time and takes every id that arrived while the one before ran, so a busy
// writer asks about as often as it inserts, and an idle one asks at once.
//
// An answer is used while it is fresh (aheadFresh from when its query
// started): a second attempt of the same event cannot enter the pipeline
// meanwhile (ingest-api's claim), and this writer's own answers are in its
// memory, which Lookup always reads.
const (
	aheadFresh   = 5 * time.Second
	aheadTimeout = 3 * time.Second
	// aheadMax bounds the ids asked or answered held: past it, Ahead
	// asks nothing more and Lookup asks itself.
	aheadMax = 50_000
)

var errStopped = errors.New("lookups ahead stopped")

// asked is one query of the ids asked ahead.
type asked struct {
	ids   []string
	start time.Time     // when the query started; zero until then
	done  chan struct{} // closed once found or err is set
	found map[string]outcome.Code
	err   error
}

func newAsked() *asked { return &asked{done: make(chan struct{})} }

// fresh reports whether its answer may still be used at now.
func (q *asked) fresh(now time.Time) bool { return q.start.IsZero() || now.Sub(q.start) < aheadFresh }

// Ahead asks, in the background, for the recorded outcomes of ids; a
// later Lookup of them waits for that answer instead of asking again. It
// never blocks, and does nothing unless Run runs.
func (r *Record) Ahead(ids []string) {
	if len(ids) == 0 {
		return
	}
	now := time.Now()
	r.mu.Lock()
	if r.next == nil || len(r.ahead)+len(ids) > aheadMax {
		r.mu.Unlock()
		return
	}
	for _, id := range ids {
		if q := r.ahead[id]; q == nil || !q.fresh(now) {
			r.ahead[id] = r.next
			r.next.ids = append(r.next.ids, id)
		}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run asks the ids of Ahead, one query at a time, until ctx ends.
func (r *Record) Run(ctx context.Context) error {
	r.mu.Lock()
	r.next = newAsked()
	r.mu.Unlock()
	defer r.stop()
	sweep := time.NewTicker(aheadFresh)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			r.sweep(time.Now())
		case <-r.wake:
			r.ask(ctx)
		}
	}
}

// ask runs the query of the ids gathered so far.
func (r *Record) ask(ctx context.Context) {
	r.mu.Lock()
	q := r.next
	r.next = newAsked()
	q.start = time.Now()
	r.mu.Unlock()
	if len(q.ids) == 0 {
		close(q.done)
		return
	}
	qctx, cancel := context.WithTimeout(ctx, aheadTimeout)
	q.found, q.err = r.fromTable(qctx, q.ids, "ahead")
	cancel()
	if q.err != nil {
		r.log.Debug("outcomes not asked ahead: the batch asks itself", zap.Error(q.err))
	}
	close(q.done)
}

// sweep forgets answers no longer fresh.
func (r *Record) sweep(now time.Time) {
	r.mu.Lock()
	for id, q := range r.ahead {
		if !q.fresh(now) {
			delete(r.ahead, id)
		}
	}
	r.mu.Unlock()
}

// stop answers what is still gathered with errStopped (Lookup then asks
// itself) and makes Ahead do nothing.
func (r *Record) stop() {
	r.mu.Lock()
	q := r.next
	r.next = nil
	clear(r.ahead)
	r.mu.Unlock()
	q.err = errStopped
	close(q.done)
}

// fromAhead splits ids into the answers asked ahead (waited for) and the
// ids nobody asked about yet (rest).
func (r *Record) fromAhead(ctx context.Context, ids []string) (found map[string]outcome.Code, rest []string, err error) {
	now := time.Now()
	var waits map[*asked][]string
	r.mu.Lock()
	for _, id := range ids {
		if q := r.ahead[id]; q != nil && q.fresh(now) {
			if waits == nil {
				waits = make(map[*asked][]string)
			}
			waits[q] = append(waits[q], id)
		} else {
			rest = append(rest, id)
		}
	}
	r.mu.Unlock()
	found = make(map[string]outcome.Code, len(ids))
	for q, qids := range waits {
		select {
		case <-q.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if q.err != nil {
			rest = append(rest, qids...)
			continue
		}
		for _, id := range qids {
			if code, ok := q.found[id]; ok {
				note(found, id, code)
			}
		}
	}
	return found, rest, nil
}
