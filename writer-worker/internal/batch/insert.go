package batch

import (
	"context"
	"time"

	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
)

// isolateBudget bounds the inserts spent finding which events a table
// rejects for good: finding k refused events among n costs about
// 2k·log2(n/k) inserts. A table that refuses everything (a broken schema)
// costs the whole budget, after which the rest go to the dead letters
// together; the flush's INSERT_TIMEOUT bounds the time it takes as well.
func isolateBudget(n int) int { return min(1024, max(64, 2*n)) }

// storeValues inserts the values of items in one INSERT. When ClickHouse
// rejects it for good, the batch is split in halves until the events it
// rejects are found; those get the permanent error in errs (their own dead
// letters), the others are stored. The events of one backlog request (one
// Group) are never split: they are stored together or not at all. An error
// returned is a transient failure of the whole batch.
func (w *Writer) storeValues(ctx context.Context, items []dedupe.Item, errs []error) error {
	var units [][]int
	group := map[string]int{} // backlog group -> its unit
	for i := range items {
		it := &items[i]
		if it.Event.Outcome != outcome.Stored || it.SkipValues || len(it.Event.Values) == 0 {
			continue
		}
		if g := it.Event.Group; g != "" {
			if u, ok := group[g]; ok {
				units[u] = append(units[u], i)
				continue
			}
			group[g] = len(units)
		}
		units = append(units, []int{i})
	}
	err := w.insert(ctx, items, units)
	if failure.KindOf(err) != failure.Permanent {
		return err
	}
	budget := isolateBudget(len(units))
	w.isolate(ctx, items, errs, units, err, &budget)
	return nil
}

// isolate finds the units of events (indexes into items) whose insert
// failed for good with err that the table rejects; it sets err on their
// events and on the events of halves that failed transiently.
func (w *Writer) isolate(ctx context.Context, items []dedupe.Item, errs []error, units [][]int, err error, budget *int) {
	fail := func(units [][]int, err error) {
		for _, u := range units {
			for _, i := range u {
				errs[i] = err
			}
		}
	}
	if len(units) == 1 || *budget <= 0 {
		fail(units, err)
		return
	}
	half := len(units) / 2
	for _, part := range [][][]int{units[:half], units[half:]} {
		*budget--
		switch perr := w.insert(ctx, items, part); {
		case perr == nil:
		case failure.KindOf(perr) == failure.Permanent:
			w.isolate(ctx, items, errs, part, perr, budget)
		default:
			fail(part, perr)
		}
	}
}

// insert writes the values of the items of units in one INSERT.
func (w *Writer) insert(ctx context.Context, items []dedupe.Item, units [][]int) error {
	var idx []int
	for _, u := range units {
		idx = append(idx, u...)
	}
	rows := valueRows(items, idx)
	start := time.Now()
	err := w.store.InsertValues(ctx, rows)
	w.m.observeInsert(tableValues, len(rows), start, err)
	return err
}

// valueRows lists the rows of the values of the items at idx.
func valueRows(items []dedupe.Item, idx []int) []chstore.ValueRow {
	n := 0
	for _, i := range idx {
		n += len(items[i].Event.Values)
	}
	rows := make([]chstore.ValueRow, 0, n)
	for _, i := range idx {
		ev := &items[i].Event
		for _, v := range ev.Values {
			rows = append(rows, chstore.ValueRow{
				Entity: v.Entity, Input: v.Input, TsNs: ev.ReadingNs, ReceivedNs: ev.ReceivedNs, Serial: ev.Serial,
				DeviceInput: v.DeviceInput, EventID: ev.ID, JSON: v.JSON,
			})
		}
	}
	return rows
}
