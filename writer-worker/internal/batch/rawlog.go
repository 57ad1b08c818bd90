package batch

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// rawBatch is what one value flush hands to the raw message log: its rows,
// and the envelopes whose events are answered, held until the rows are
// stored.
type rawBatch struct {
	rows []chstore.MessageRow
	keys []chstore.KeyRow // outcomes of keyed events, for their retries
	// marks are the minutes the flush's values are in (or were, stored
	// by an earlier delivery): internal/rollup computes them again.
	marks []chstore.Mark
	acks  []*settle.Msg
	// frees release the claims of events dropped from the acked
	// envelopes (claims.go), once they are acked.
	frees []freeing
	// remembered is the number of the idem.Record.Remember call that
	// noted keys (the highest, once batches are merged).
	remembered uint64
}

// logRaw writes the Messages view in large, infrequent inserts: it is a
// downstream stage (spec section 1), off the confirmation path. Events are
// acked only after their raw message is stored, so a crash loses nothing: a
// redelivered event's values are found already stored and skipped.
func (w *Writer) logRaw(b *batcher.Batch[rawBatch], release func(time.Duration)) {
	defer release(0)
	var frees []freeing
	var nr, nk, na int
	for _, rb := range b.Items {
		nr, nk, na = nr+len(rb.rows), nk+len(rb.keys), na+len(rb.acks)
	}
	rows := make([]chstore.MessageRow, 0, nr)
	keys := make([]chstore.KeyRow, 0, nk)
	acks := make([]*settle.Msg, 0, na)
	marked := map[chstore.Mark]struct{}{}
	var remembered uint64
	for _, rb := range b.Items {
		remembered = max(remembered, rb.remembered)
		rows = append(rows, rb.rows...)
		keys = append(keys, rb.keys...)
		acks = append(acks, rb.acks...)
		frees = append(frees, rb.frees...)
		for _, m := range rb.marks {
			marked[m] = struct{}{}
		}
	}
	marks := make([]chstore.Mark, 0, len(marked))
	for m := range marked {
		marks = append(marks, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.InsertTimeout)
	start := time.Now()
	err := w.store.InsertMessages(ctx, rows)
	w.m.observeInsert(tableMessages, len(rows), start, err)
	if err == nil {
		start = time.Now()
		err = w.store.InsertKeys(ctx, keys)
		w.m.observeInsert(tableKeys, len(keys), start, err)
	}
	if err == nil {
		start = time.Now()
		err = w.store.InsertMarks(ctx, start.UnixNano(), marks)
		w.m.observeInsert(tableMarks, len(marks), start, err)
	}
	cancel()
	if err == nil {
		w.keys.Written(keys, remembered)
	} else {
		// The redelivery finds the values stored and answers the same
		// again, writing the key rows then.
		w.keys.Forget(keys, remembered)
	}
	if err != nil {
		// Redelivered later: values are skipped as stored, the raw
		// message is written then.
		w.log.Warn("raw messages not stored, events will be redelivered", zap.Int("messages", len(rows)), zap.Error(err))
	}
	for _, m := range acks {
		m.Release(err)
	}
	if err == nil {
		for _, fr := range frees {
			w.frees.add(fr)
		}
	}
}
