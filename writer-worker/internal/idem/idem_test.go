package idem

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// fakeStore holds event_keys rows.
type fakeStore []chstore.KeyRow

func (f fakeStore) KeyOutcomes(_ context.Context, ids []string, _ int64) ([]chstore.KeyRow, error) {
	var out []chstore.KeyRow
	for _, k := range f {
		if slices.Contains(ids, k.EventID) {
			out = append(out, k)
		}
	}
	return out, nil
}

// What a retry is answered: this writer's memory until the row is written,
// the table after; a dead letter's "failed to store" gives way to the
// outcome of its replay, in memory and in the table alike.
func TestRecord(t *testing.T) {
	r := New(fakeStore{{EventID: "in-table", Outcome: outcome.Stored}, {EventID: "dead-then-replayed", Outcome: outcome.StorageFailed},
		{EventID: "replayed-then-dead", Outcome: outcome.NoConnections}, {EventID: "replayed-then-dead", Outcome: outcome.StorageFailed}}, nil, time.Hour, zap.NewNop())
	r.Remember([]chstore.KeyRow{{EventID: "fresh", Outcome: outcome.NoConnections}, {EventID: "dead-then-replayed", Outcome: outcome.Stored}})
	got, err := r.Lookup(context.Background(), []string{"in-table", "fresh", "dead-then-replayed", "replayed-then-dead", "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]outcome.Code{"in-table": outcome.Stored, "fresh": outcome.NoConnections, "dead-then-replayed": outcome.Stored, "replayed-then-dead": outcome.NoConnections}
	if len(got) != len(want) {
		t.Fatalf("Lookup = %v, want %v", got, want)
	}
	for id, c := range want {
		if got[id] != c {
			t.Fatalf("Lookup = %v, want %v", got, want)
		}
	}
	n := r.Remember([]chstore.KeyRow{{EventID: "fresh", Outcome: outcome.StorageFailed}})
	if got, _ := r.Lookup(context.Background(), []string{"fresh"}); got["fresh"] != outcome.NoConnections {
		t.Fatalf("a later failure replaced a final outcome: %v", got)
	}
	r.Forget([]chstore.KeyRow{{EventID: "fresh"}}, n)
	if got, _ := r.Lookup(context.Background(), []string{"fresh"}); len(got) != 0 {
		t.Fatalf("forgotten outcome still answered: %v", got)
	}
	if Prefer(outcome.StorageFailed, outcome.Stored) != outcome.Stored || Prefer(outcome.Stored, outcome.StorageFailed) != outcome.Stored {
		t.Fatal("Prefer must keep the final outcome")
	}
}

// An outcome whose row is written stays in memory writtenKept: a lookup
// whose query started before the row was written did not see it, and
// memory must still answer. An id noted again by a later Remember (a
// replay's outcome, its row not written yet) is dropped neither with the
// earlier row nor by a failure of the earlier row's write.
func TestWrittenOutcomesOutliveTheLookupsBeforeThem(t *testing.T) {
	r := New(fakeStore{}, nil, time.Hour, zap.NewNop())
	n1 := r.Remember([]chstore.KeyRow{{EventID: "k", Outcome: outcome.Stored}, {EventID: "r", Outcome: outcome.StorageFailed}})
	r.Remember([]chstore.KeyRow{{EventID: "r", Outcome: outcome.Stored}}) // before the first rows are written
	r.Written([]chstore.KeyRow{{EventID: "k"}, {EventID: "r"}}, n1)
	if got, _ := r.Lookup(context.Background(), []string{"k"}); got["k"] != outcome.Stored {
		t.Fatalf("right after its row was written: %v, want k stored", got)
	}
	r.mu.Lock()
	r.written[0].at = r.written[0].at.Add(-writtenKept)
	r.mu.Unlock()
	r.Written(nil, n1)
	got, _ := r.Lookup(context.Background(), []string{"k", "r"})
	if _, ok := got["k"]; ok || got["r"] != outcome.Stored {
		t.Fatalf("writtenKept after the rows: %v, want k dropped, r stored kept", got)
	}
	r.Forget([]chstore.KeyRow{{EventID: "r"}}, n1)
	if got, _ := r.Lookup(context.Background(), []string{"r"}); got["r"] != outcome.Stored {
		t.Fatalf("a failed write of the earlier row dropped the later outcome: %v", got)
	}
}
