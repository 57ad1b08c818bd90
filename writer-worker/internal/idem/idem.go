// Package idem is writer-worker's record of the outcomes of keyed events
// (sent with an Idempotency-Key): what a retry of each is answered. It holds
// the outcomes this writer answered whose event_keys rows are not written
// yet, and reads event_keys for the rest (internal/janitor drops the days
// past the window).
package idem

import (
	"context"
	"sync"
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
	store  Store
	window time.Duration
	log    *zap.Logger

	mu       sync.Mutex
	answered map[string]outcome.Code
}

// New returns a record whose outcomes answer retries for window.
func New(store Store, window time.Duration, log *zap.Logger) *Record {
	return &Record{store: store, window: window, log: log, answered: make(map[string]outcome.Code)}
}

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
	rows, err := r.store.KeyOutcomes(ctx, ids, time.Now().Add(-r.window).UnixNano())
	if err != nil {
		return nil, err
	}
	found := make(map[string]outcome.Code, len(rows))
	for _, k := range rows {
		note(found, k.EventID, k.Outcome)
	}
	r.mu.Lock()
	for _, id := range ids {
		if code, ok := r.answered[id]; ok {
			note(found, id, code)
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

// Remember notes outcomes answered until their event_keys rows are stored.
func (r *Record) Remember(keys []chstore.KeyRow) {
	r.mu.Lock()
	for _, k := range keys {
		note(r.answered, k.EventID, k.Outcome)
	}
	r.mu.Unlock()
}

// Forget drops outcomes whose rows are stored (or whose events will be
// redelivered and answered again).
func (r *Record) Forget(keys []chstore.KeyRow) {
	r.mu.Lock()
	for _, k := range keys {
		delete(r.answered, k.EventID)
	}
	r.mu.Unlock()
}
