// Package idem is writer-worker's record of the outcomes of keyed events
// (sent with an Idempotency-Key): what a retry of each is answered. It holds
// the outcomes this writer answered whose event_keys rows are not written
// yet, and reads event_keys for the rest (internal/janitor drops the days
// past the window).
package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Store is what the record needs of ClickHouse.
type Store interface {
	KeyOutcomes(ctx context.Context, ids []string, sinceNs int64) ([]chstore.KeyRow, error)
}

var _ Store = (*chstore.Store)(nil)

// Record answers "how did the first attempt of this keyed event end?".
type Record struct {
	store Store
	seen  *Seen
	// firsts counts the events FirstAttempt knew; lookups, the queries
	// of event_keys.
	firsts, lookups atomic.Uint64
	window          time.Duration
	log             *zap.Logger

	mu       sync.Mutex
	answered map[string]remembered
	// n counts the calls of Remember; written holds the rows stored, to
	// be dropped from answered once no lookup can have started before them.
	n       uint64
	written []written
}

// remembered is an outcome this writer answered, and the Remember call
// that noted it last.
type remembered struct {
	code outcome.Code
	n    uint64
}

// written is a call of Written: the ids whose rows it stored, noted by
// Remember calls up to n.
type written struct {
	at  time.Time
	n   uint64
	ids []string
}

// lookupMax bounds a lookup's query of event_keys. An outcome stays in
// memory writtenKept after its row is written: a query that started before
// the row was written, and so did not see it, has returned by then, and
// the memory read after it still answers.
const (
	lookupMax   = 10 * time.Second
	writtenKept = lookupMax + time.Second
)

// New returns a record whose outcomes answer retries for window; seen
// (nil: none) tells first attempts, which need no lookup.
func New(store Store, seen *Seen, window time.Duration, log *zap.Logger) *Record {
	return &Record{store: store, seen: seen, window: window, log: log, answered: make(map[string]remembered)}
}

// FirstAttempts reports, for each of ids (claims[i]: the claim its request
// took, event.ClaimID), whether that keyed event certainly had no earlier
// attempt within the window (see Seen); false means "look it up". An
// outcome this writer holds is never a first.
func (r *Record) FirstAttempts(ids, claims []string) []bool {
	first := r.seen.FirstAttempts(ids, claims)
	n := 0
	r.mu.Lock()
	for i, id := range ids {
		if _, answered := r.answered[id]; answered {
			first[i] = false
		}
		if first[i] {
			n++
		}
	}
	r.mu.Unlock()
	r.firsts.Add(uint64(n))
	return first
}

// Counts are how many keyed events were known for first attempts, and how
// many queries of event_keys were made.
func (r *Record) Counts() (firsts, lookups uint64) { return r.firsts.Load(), r.lookups.Load() }

// Prefer picks the outcome that stands when an event has two: a dead
// letter's "failed to store" gives way to the outcome of its replay.
func Prefer(a, b outcome.Code) outcome.Code {
	if a == outcome.StorageFailed {
		return b
	}
	return a
}

// Lookup returns the recorded outcomes of those of ids that have one.
func (r *Record) Lookup(ctx context.Context, ids []string) (map[string]outcome.Code, error) {
	r.lookups.Add(1)
	qctx, cancel := context.WithTimeout(ctx, lookupMax)
	rows, err := r.store.KeyOutcomes(qctx, ids, time.Now().Add(-r.window).UnixNano())
	cancel()
	if err != nil {
		return nil, err
	}
	found := make(map[string]outcome.Code, len(rows))
	for _, k := range rows {
		note(found, k.EventID, k.Outcome)
	}
	r.mu.Lock()
	for _, id := range ids {
		if a, ok := r.answered[id]; ok {
			note(found, id, a.code)
		}
	}
	r.mu.Unlock()
	return found, nil
}

// note records code for id in m, or the one of it and m's that stands.
func note(m map[string]outcome.Code, id string, code outcome.Code) {
	if prior, ok := m[id]; ok {
		code = Prefer(prior, code)
	}
	m[id] = code
}

// Remember notes outcomes answered until their event_keys rows are stored,
// and returns its number: Written and Forget take the highest of the calls
// whose rows they concern.
func (r *Record) Remember(keys []chstore.KeyRow) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	for _, k := range keys {
		code := k.Outcome
		if a, ok := r.answered[k.EventID]; ok {
			code = Prefer(a.code, code)
		}
		r.answered[k.EventID] = remembered{code: code, n: r.n}
	}
	return r.n
}

// Written drops outcomes whose rows are stored, writtenKept later: those
// noted by Remember calls up to n (an id noted again since keeps its newer
// outcome until its own row is written).
func (r *Record) Written(keys []chstore.KeyRow, n uint64) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	done := 0
	for _, w := range r.written {
		if now.Sub(w.at) < writtenKept {
			break
		}
		for _, id := range w.ids {
			if a, ok := r.answered[id]; ok && a.n <= w.n {
				delete(r.answered, id)
			}
		}
		done++
	}
	r.written = r.written[done:]
	if len(keys) > 0 {
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.EventID
		}
		r.written = append(r.written, written{at: now, n: n, ids: ids})
	}
}

// Forget drops outcomes noted by Remember calls up to n at once: their rows
// were not written, and their events will be redelivered and answered again.
func (r *Record) Forget(keys []chstore.KeyRow, n uint64) {
	r.mu.Lock()
	for _, k := range keys {
		if a, ok := r.answered[k.EventID]; ok && a.n <= n {
			delete(r.answered, k.EventID)
		}
	}
	r.mu.Unlock()
}
