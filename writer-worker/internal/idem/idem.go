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

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/metrics"
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
	answered map[string]remembered
	// n counts the calls of Remember; written holds the rows stored, to
	// be dropped from answered once no answer asked ahead predates them.
	n       uint64
	written []written
	// ahead holds the ids asked ahead (ahead.go), next the query
	// gathering ids (nil unless Run runs); wake starts it.
	ahead map[string]*asked
	next  *asked
	wake  chan struct{}
	asks  *prometheus.CounterVec
}

// New returns a record whose outcomes answer retries for window; its
// metrics go to reg (nil: not exported).
func New(store Store, window time.Duration, reg prometheus.Registerer, log *zap.Logger) *Record {
	r := &Record{store: store, window: window, log: log, answered: make(map[string]remembered),
		ahead: make(map[string]*asked), wake: make(chan struct{}, 1),
		asks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "key_lookups_total",
			Help: "Queries of event_keys for the outcomes of keyed events, by when: ahead (as their envelopes arrived) or at_check (when their batch was checked, nobody having asked ahead).",
		}, []string{"when"}),
	}
	metrics.Or(reg).MustRegister(r.asks)
	return r
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

// Prefer picks the outcome that stands when an event has two: a dead
// letter's "failed to store" gives way to the outcome of its replay.
func Prefer(a, b outcome.Code) outcome.Code {
	if a == outcome.StorageFailed {
		return b
	}
	return a
}

// Lookup returns the recorded outcomes of those of ids that have one: the
// answers asked ahead, event_keys for the rest, and this writer's memory.
func (r *Record) Lookup(ctx context.Context, ids []string) (map[string]outcome.Code, error) {
	found, rest, err := r.fromAhead(ctx, ids)
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		more, err := r.fromTable(ctx, rest, "at_check")
		if err != nil {
			return nil, err
		}
		for id, code := range more {
			note(found, id, code)
		}
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

// fromTable reads the outcomes of ids in event_keys, within the window;
// when is the label it is counted under.
func (r *Record) fromTable(ctx context.Context, ids []string, when string) (map[string]outcome.Code, error) {
	r.asks.WithLabelValues(when).Inc()
	rows, err := r.store.KeyOutcomes(ctx, ids, time.Now().Add(-r.window).UnixNano())
	if err != nil {
		return nil, err
	}
	found := make(map[string]outcome.Code, len(rows))
	for _, k := range rows {
		note(found, k.EventID, k.Outcome)
	}
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
	r.n++
	for _, k := range keys {
		code := k.Outcome
		if a, ok := r.answered[k.EventID]; ok {
			code = Prefer(a.code, code)
		}
		r.answered[k.EventID] = remembered{code: code, n: r.n}
	}
	r.mu.Unlock()
}

// Written drops outcomes whose rows are stored, aheadFresh later: until
// then a query asked ahead before the row was written may still be used,
// and memory must answer for it.
func (r *Record) Written(keys []chstore.KeyRow) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.written {
		if now.Sub(w.at) < aheadFresh {
			break
		}
		for _, id := range w.ids {
			if a, ok := r.answered[id]; ok && a.n <= w.n {
				delete(r.answered, id)
			}
		}
		n++
	}
	r.written = r.written[n:]
	if len(keys) > 0 {
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = k.EventID
		}
		r.written = append(r.written, written{at: now, n: r.n, ids: ids})
	}
}

// Forget drops outcomes at once: their rows were not written, their events
// will be redelivered and answered again.
func (r *Record) Forget(keys []chstore.KeyRow) {
	r.mu.Lock()
	for _, k := range keys {
		delete(r.answered, k.EventID)
	}
	r.mu.Unlock()
}
