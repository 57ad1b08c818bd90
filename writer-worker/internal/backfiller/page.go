package backfiller

import (
	"context"
	"slices"

	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/resolve"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// pager walks one job's raw messages a page at a time.
type pager struct {
	serial   string
	fromNs   int64
	entry    *registry.Entry
	store    *chstore.Store
	cursorNs int64 // the last message handled
	cursorID string
	rows     []chstore.ValueRow // reused from page to page
	entities []string
	inputs   []string
	limit    int
}

func newPager(j backfill.Job, store *chstore.Store) *pager {
	p := &pager{serial: j.Serial, fromNs: j.FromNs, entry: registry.NewEntry(j.Device(), 0), store: store,
		cursorNs: j.CursorNs, cursorID: j.CursorID, limit: pageMessages}
	for _, in := range j.Inputs {
		if in.Entity != "" {
			p.entities = appendNew(p.entities, in.Entity)
			p.inputs = appendNew(p.inputs, in.EntityInput)
		}
	}
	return p
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// next maps the page of raw messages after the cursor, received before
// upto, and stores the values that are not stored yet; done: there were
// no more messages before upto. The cursor moves only once the page is
// stored.
func (p *pager) next(ctx context.Context, upto int64) (done bool, c backfill.Counts, err error) {
	after := p.cursorNs
	if after < p.fromNs {
		after = p.fromNs - 1 // nothing is before fromNs: every message at fromNs comes after
	}
	msgs, err := p.store.RawMessages(ctx, p.serial, p.fromNs, upto, after, p.cursorID, p.limit)
	if err != nil || len(msgs) == 0 {
		return err == nil, c, err
	}
	rows := p.rows[:0]
	for _, m := range msgs {
		mapped, err := resolve.Event(event.Event{ID: m.EventID, Serial: p.serial, ReceivedNs: m.TsNs, ReadingNs: m.ReadingNs, Payload: m.Payload}, p.entry, nil)
		if err != nil {
			c.Unreadable++
			continue
		}
		for _, v := range mapped.Values {
			rows = append(rows, chstore.ValueRow{Entity: v.Entity, Input: v.Input, TsNs: m.ReadingNs, ReceivedNs: m.TsNs,
				Serial: p.serial, DeviceInput: v.DeviceInput, EventID: m.EventID, JSON: v.JSON})
		}
	}
	c.Messages = int64(len(msgs))
	if len(rows) > 0 {
		minNs, maxNs := rows[0].TsNs, rows[0].TsNs
		for _, r := range rows {
			minNs, maxNs = min(minNs, r.TsNs), max(maxNs, r.TsNs)
		}
		stored, err := p.store.StoredValues(ctx, p.serial, p.entities, p.inputs, minNs, maxNs)
		if err != nil {
			return false, backfill.Counts{}, err
		}
		fresh := rows[:0]
		for _, r := range rows {
			if !stored[chstore.ValueKey{Entity: r.Entity, Input: r.Input, EventID: r.EventID, DeviceInput: r.DeviceInput}] {
				fresh = append(fresh, r)
			}
		}
		c.Skipped, c.Readings = int64(len(rows)-len(fresh)), int64(len(fresh))
		if err := p.store.InsertValues(ctx, fresh); err != nil {
			return false, backfill.Counts{}, err
		}
		p.rows = rows
	}
	last := msgs[len(msgs)-1]
	p.cursorNs, p.cursorID = last.TsNs, last.EventID
	return len(msgs) < p.limit, c, nil
}
