package idem

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// gatedStore answers like fakeStore once each query is let through gate,
// and notes the ids of each query.
type gatedStore struct {
	rows    fakeStore
	gate    chan struct{}
	fail    error
	mu      sync.Mutex
	queries [][]string
}

func (g *gatedStore) KeyOutcomes(ctx context.Context, ids []string, since int64) ([]chstore.KeyRow, error) {
	g.mu.Lock()
	g.queries = append(g.queries, slices.Clone(ids))
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.fail != nil {
		return nil, g.fail
	}
	return g.rows.KeyOutcomes(ctx, ids, since)
}

func (g *gatedStore) asked() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.queries)
}

func runRecord(t *testing.T, store Store) *Record {
	t.Helper()
	r := New(store, time.Hour, nil, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Run has started once Ahead is taken.
	for i := 0; ; i++ {
		r.mu.Lock()
		started := r.next != nil
		r.mu.Unlock()
		if started {
			return r
		}
		if i == 1000 {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond)
	}
}

func waitQueries(t *testing.T, g *gatedStore, n int) [][]string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if q := g.asked(); len(q) >= n {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("queries %v, want %d", g.asked(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The batch's check finds the outcomes asked as the envelopes arrived: no
// query of its own; ids that arrive while a query runs share the next one.
func TestLookupFindsWhatWasAskedAhead(t *testing.T) {
	g := &gatedStore{rows: fakeStore{{EventID: "a", Outcome: outcome.Stored}, {EventID: "c", Outcome: outcome.NoConnections}}, gate: make(chan struct{}, 10)}
	r := runRecord(t, g)
	r.Ahead([]string{"a", "b"})
	waitQueries(t, g, 1) // held at the gate
	r.Ahead([]string{"c"})
	r.Ahead([]string{"d", "a"}) // a: asked already
	g.gate <- struct{}{}
	if q := waitQueries(t, g, 2); !slices.Equal(q[0], []string{"a", "b"}) || !slices.Equal(q[1], []string{"c", "d"}) {
		t.Fatalf("queries %v, want [a b] then [c d]", q)
	}
	g.gate <- struct{}{}
	got, err := r.Lookup(context.Background(), []string{"a", "b", "c", "d"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != outcome.Stored || got["c"] != outcome.NoConnections {
		t.Fatalf("Lookup = %v, want a stored, c no connections", got)
	}
	if q := g.asked(); len(q) != 2 {
		t.Fatalf("the check asked again: %v", q)
	}
	// Nobody asked about e: the check asks itself, and this writer's
	// memory still counts for what was asked ahead.
	r.Remember([]chstore.KeyRow{{EventID: "b", Outcome: outcome.NoConnections}})
	g.gate <- struct{}{}
	got, err = r.Lookup(context.Background(), []string{"b", "e"})
	if err != nil {
		t.Fatal(err)
	}
	if q := g.asked(); len(q) != 3 || !slices.Equal(q[2], []string{"e"}) {
		t.Fatalf("queries %v, want a third of [e]", q)
	}
	if len(got) != 1 || got["b"] != outcome.NoConnections {
		t.Fatalf("Lookup = %v, want b from memory", got)
	}
}

// A query ahead that failed costs nothing but time: the check asks
// itself. Answers older than aheadFresh are not used.
func TestAFailedOrStaleAnswerIsAskedAgain(t *testing.T) {
	g := &gatedStore{rows: fakeStore{{EventID: "a", Outcome: outcome.Stored}}, gate: make(chan struct{}, 10), fail: errors.New("connection refused")}
	r := runRecord(t, g)
	r.Ahead([]string{"a"})
	g.gate <- struct{}{}
	waitQueries(t, g, 1)
	r.mu.Lock()
	q := r.ahead["a"]
	r.mu.Unlock()
	<-q.done
	g.fail = nil
	g.gate <- struct{}{}
	got, err := r.Lookup(context.Background(), []string{"a"})
	if err != nil || got["a"] != outcome.Stored {
		t.Fatalf("Lookup after a failed query ahead = %v, %v; want a stored", got, err)
	}
	if n := len(g.asked()); n != 2 {
		t.Fatalf("%d queries, want 2 (ahead, failed; then the check's)", n)
	}
	r.Ahead([]string{"s"})
	g.gate <- struct{}{}
	waitQueries(t, g, 3)
	r.mu.Lock()
	q = r.ahead["s"]
	r.mu.Unlock()
	<-q.done
	q.start = q.start.Add(-aheadFresh) // as if asked long ago
	g.gate <- struct{}{}
	if _, err := r.Lookup(context.Background(), []string{"s"}); err != nil {
		t.Fatal(err)
	}
	if n := len(g.asked()); n != 4 {
		t.Fatalf("%d queries, want 4: a stale answer is asked again", n)
	}
}

// Without Run (stopped, or never started) Ahead does nothing and Lookup
// asks itself; a Lookup waiting on a query that will not run is answered
// when Run stops.
func TestAheadWithoutRun(t *testing.T) {
	g := &gatedStore{rows: fakeStore{{EventID: "a", Outcome: outcome.Stored}}, gate: make(chan struct{}, 10)}
	r := New(g, time.Hour, nil, zap.NewNop())
	r.Ahead([]string{"a"})
	g.gate <- struct{}{}
	if got, err := r.Lookup(context.Background(), []string{"a"}); err != nil || got["a"] != outcome.Stored {
		t.Fatalf("Lookup = %v, %v", got, err)
	}
	if n := len(g.asked()); n != 1 {
		t.Fatalf("%d queries, want 1", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for r.nextIsNil() {
		time.Sleep(time.Millisecond)
	}
	// Held: the wake is taken, but the query is stopped before it runs.
	r.mu.Lock()
	r.ahead["b"] = r.next
	r.next.ids = append(r.next.ids, "b")
	r.mu.Unlock()
	looked := make(chan error, 1)
	go func() {
		_, err := r.Lookup(context.Background(), []string{"b"})
		looked <- err
	}()
	cancel()
	<-done
	g.gate <- struct{}{}
	select {
	case err := <-looked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lookup still waits for a query that Run stopped")
	}
}

func (r *Record) nextIsNil() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next == nil
}

// An outcome whose row is written stays in memory for aheadFresh: an
// answer asked ahead before the row was written (not found) may be used
// that long, and memory must still say how the event ended. A later
// Remember of the same id is not dropped with the earlier row.
func TestWrittenOutcomesOutliveTheAnswersAskedBefore(t *testing.T) {
	r := New(fakeStore{}, time.Hour, nil, zap.NewNop())
	r.Remember([]chstore.KeyRow{{EventID: "k", Outcome: outcome.Stored}, {EventID: "r", Outcome: outcome.StorageFailed}})
	r.Written([]chstore.KeyRow{{EventID: "k"}, {EventID: "r"}})
	if got, _ := r.Lookup(context.Background(), []string{"k"}); got["k"] != outcome.Stored {
		t.Fatalf("right after its row was written: %v, want k stored", got)
	}
	r.Remember([]chstore.KeyRow{{EventID: "r", Outcome: outcome.Stored}}) // a replay, its row not written yet
	r.mu.Lock()
	r.written[0].at = r.written[0].at.Add(-aheadFresh)
	r.mu.Unlock()
	r.Written(nil)
	got, _ := r.Lookup(context.Background(), []string{"k", "r"})
	if _, ok := got["k"]; ok || got["r"] != outcome.Stored {
		t.Fatalf("aheadFresh after the rows: %v, want k dropped, r stored kept", got)
	}
}
