package backfiller

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/resolve"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// pager walks one job's raw messages a page at a time. A page is the
// messages of a window of receive time, sized from the messages the last
// one held so that it holds about pageMessages: ClickHouse 18.16 sorts
// every row a query selects before its LIMIT, so a page read as "the next
// 5,000 after the cursor" would read the whole rest of the range each time.
type pager struct {
	serial string
	entry  *registry.Entry
	store  *chstore.Store
	// The cursor: every message before (cursorNs, cursorID) in receive
	// order is handled; cursorID "" stands before every message at cursorNs.
	cursorNs int64
	cursorID string
	windowNs int64
	rows     []chstore.ValueRow // reused from page to page
	entities []string
	inputs   []string
}

// firstWindow is a new job's first window; then windows grow or shrink up
// to 4 times a page.
const firstWindow = int64(time.Hour)

func newPager(j backfill.Job, store *chstore.Store) *pager {
	p := &pager{serial: j.Serial, entry: registry.NewEntry(j.Device(), 0), store: store,
		cursorNs: max(j.CursorNs, j.FromNs), cursorID: j.CursorID, windowNs: firstWindow}
	if j.CursorNs < j.FromNs {
		p.cursorID = ""
	}
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

// next maps the next page of raw messages received before upto and stores
// the values that are not stored yet; done: there are no more messages
// before upto. The cursor moves only once the page is stored.
func (p *pager) next(ctx context.Context, upto int64) (done bool, c backfill.Counts, err error) {
	if upto <= p.cursorNs {
		return true, c, nil
	}
	hi := min(upto, p.cursorNs+p.windowNs)
	msgs, more, err := p.store.RawMessages(ctx, p.serial, p.cursorNs, p.cursorID, hi, 2*pageMessages, pageBytes)
	if err != nil {
		return false, c, err
	}
	if c, err = p.apply(ctx, msgs); err != nil {
		return false, backfill.Counts{}, err
	}
	// An answer the bounds cut ends inside the window: go on from its last
	// message in a smaller one. Otherwise the window is done: the next
	// starts at its end, sized for about a page.
	switch got := int64(len(msgs)); {
	case more:
		last := msgs[len(msgs)-1]
		p.cursorNs, p.cursorID = last.TsNs, last.EventID
		p.windowNs = max(1, p.windowNs/4)
	default:
		p.cursorNs, p.cursorID = hi, ""
		// In floats: a window of weeks times pageMessages overflows int64.
		p.windowNs = int64(max(1, min(4*float64(p.windowNs), float64(p.windowNs)*pageMessages/float64(max(got, 1)), maxWindow)))
	}
	return p.cursorNs >= upto, c, nil
}

// apply maps msgs and inserts the values that are not stored yet.
func (p *pager) apply(ctx context.Context, msgs []chstore.RawMessage) (c backfill.Counts, err error) {
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
	p.rows = rows
	c.Messages = int64(len(msgs))
	if len(rows) == 0 {
		return c, nil
	}
	stored, err := p.stored(ctx, rows)
	if err != nil {
		return c, err
	}
	marks := chstore.MarksOf(rows) // of skipped ones too: an earlier try may have stopped before marking
	fresh := rows[:0]
	for _, r := range rows {
		if !stored[chstore.ValueKey{Entity: r.Entity, Input: r.Input, EventID: r.EventID, DeviceInput: r.DeviceInput}] {
			fresh = append(fresh, r)
		}
	}
	c.Skipped, c.Readings = int64(len(rows)-len(fresh)), int64(len(fresh))
	if err := p.store.InsertValues(ctx, fresh); err != nil {
		return c, err
	}
	return c, p.store.InsertMarks(ctx, time.Now().UnixNano(), marks)
}

// stored looks up which of rows are stored already, in groups of events
// near each other in reading time (chstore.Nearby).
func (p *pager) stored(ctx context.Context, rows []chstore.ValueRow) (map[chstore.ValueKey]bool, error) {
	evs := make([]chstore.TimedID, 0, len(rows))
	for i, r := range rows { // an event's values are adjacent and share its reading time
		if i == 0 || rows[i-1].EventID != r.EventID {
			evs = append(evs, chstore.TimedID{ID: r.EventID, Ns: r.TsNs})
		}
	}
	found := make(map[chstore.ValueKey]bool)
	err := chstore.Nearby(evs, func(ids []string, minNs, maxNs int64) error {
		part, err := p.store.StoredValues(ctx, p.serial, p.entities, p.inputs, ids, minNs, maxNs)
		maps.Copy(found, part)
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}
