// Package dedupe finds, in a batch of mapped events, what must not be stored
// again: copies of one event within the batch, events an earlier delivery
// already stored, and retries of keyed events an earlier attempt answered.
package dedupe

import (
	"context"
	"maps"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Item is one event of a batch and what the checks found.
type Item struct {
	Event event.Mapped
	// Check is set when its values may be stored already (a redelivery,
	// an event the mapper saw twice, a replay).
	Check bool
	// Claimed is set when the event's request took its claim before it
	// was published (bus.ClaimedHeader): only then can it be known for a
	// first attempt without a lookup.
	Claimed bool
	// SkipValues: they are, or another copy in this batch stores them,
	// or (Unsettled) an earlier insert of them may yet be.
	SkipValues bool
	// Unsettled is set when an earlier insert of its values went through
	// on a replica but its quorum is still pending (chstore.Unsettled):
	// neither stored nor absent yet, so it is tried again later.
	Unsettled bool
	// Repeat is set for a keyed event an earlier attempt already answered
	// with Prior: it is answered the same and stores nothing.
	Repeat bool
	Prior  outcome.Code
	// IfStored is set for a keyed event whose claim the writer cannot
	// tell held (batch.verdict ifStored): it may only be answered as an
	// earlier delivery stored it. Drop is then set unless the checks find
	// it stored, pending, or answered: nothing of it is stored, recorded
	// or answered.
	IfStored, Drop bool
}

// Stored is the check of input_values.
type Stored interface {
	StoredEvents(ctx context.Context, entities, ids []string, minNs, maxNs int64) (map[string]chstore.Presence, error)
}

var _ Stored = (*chstore.Store)(nil)

// Outcomes are the recorded outcomes of keyed events (idem.Record).
type Outcomes interface {
	Lookup(ctx context.Context, ids []string) (map[string]outcome.Code, error)
	// FirstAttempts reports, for each of ids (claims[i]: the claim its
	// request took, event.ClaimID), that it certainly had no earlier
	// attempt: it needs no lookup.
	FirstAttempts(ids, claims []string) []bool
}

// Checker runs the three checks.
type Checker struct {
	stored Stored
	keys   Outcomes
}

// New returns a Checker.
func New(stored Stored, keys Outcomes) *Checker { return &Checker{stored: stored, keys: keys} }

// Mark runs every check on items. An error (ClickHouse could not be read)
// means nothing about the batch is known.
func (c *Checker) Mark(ctx context.Context, items []Item) error {
	if err := c.dropUnfound(ctx, items); err != nil {
		return err
	}
	inBatchCopies(items)
	if err := c.keyRepeats(ctx, items); err != nil {
		return err
	}
	_, err := c.storedBefore(ctx, items)
	return err
}

// dropUnfound sets Drop on the IfStored items that no earlier delivery
// stored or recorded, before the other checks: a copy of the same event
// later in the batch (a retry its entry holds) must not take a dropped
// one for its first attempt.
func (c *Checker) dropUnfound(ctx context.Context, items []Item) error {
	var undecided []Item
	var at []int
	for i := range items {
		if items[i].IfStored {
			undecided, at = append(undecided, items[i]), append(at, i)
		}
	}
	if len(undecided) == 0 {
		return nil
	}
	ids := make([]string, len(undecided))
	for i := range undecided {
		ids[i] = undecided[i].Event.ID
	}
	recorded, err := c.keys.Lookup(ctx, ids)
	if err != nil {
		return err
	}
	stored, err := c.storedBefore(ctx, undecided)
	if err != nil {
		return err
	}
	for _, i := range at {
		id := items[i].Event.ID
		if _, ok := recorded[id]; !ok && !stored[id] {
			items[i].Drop, items[i].SkipValues = true, true
		}
	}
	return nil
}

// inBatchCopies keeps one copy of an event that two envelopes of the batch
// carry (an events message mapped twice, its first envelope's ack lost; a
// replay beside the original): the check against ClickHouse cannot see a
// copy that is not inserted yet.
func inBatchCopies(items []Item) {
	seen := make(map[string]struct{}, len(items))
	for i := range items {
		if items[i].Drop {
			continue
		}
		id := items[i].Event.ID
		if _, dup := seen[id]; dup {
			items[i].SkipValues = true
			continue
		}
		seen[id] = struct{}{}
	}
}

// keyRepeats finds keyed events an earlier attempt already answered: in the
// record (this writer's memory, event_keys within the window), and later
// copies of one event within this batch (a device retried while the first
// attempt was still on its way). A first delivery of an event the record
// knows for a first attempt is not looked up. A replay of a dead letter is
// not a repeat of the "failed to store" its letter was answered with: it
// may store.
func (c *Checker) keyRepeats(ctx context.Context, items []Item) error {
	// First deliveries of claimed events are asked about at once, for the
	// batch; the others, and those not known for first attempts, are
	// looked up, in the batch's order.
	var asked, claims []string
	keyed := false
	for i := range items {
		if it := &items[i]; it.Event.Keyed && !it.Drop {
			keyed = true
			if !it.Check && it.Claimed {
				asked, claims = append(asked, it.Event.ID), append(claims, event.ClaimID(it.Event.ID, it.Event.Group))
			}
		}
	}
	if !keyed {
		return nil
	}
	firsts := c.keys.FirstAttempts(asked, claims)
	var ids []string
	j := 0
	for i := range items {
		if it := &items[i]; it.Event.Keyed && !it.Drop {
			known := false
			if !it.Check && it.Claimed {
				known, j = firsts[j], j+1
			}
			if !known {
				ids = append(ids, it.Event.ID)
			}
		}
	}
	var found map[string]outcome.Code
	if len(ids) > 0 {
		var err error
		if found, err = c.keys.Lookup(ctx, ids); err != nil {
			return err
		}
	}
	first := make(map[string]*Item)
	for i := range items {
		it := &items[i]
		if !it.Event.Keyed || it.Drop {
			continue
		}
		if prior, ok := found[it.Event.ID]; ok && !(prior == outcome.StorageFailed && it.Event.Replay) {
			it.Repeat, it.Prior, it.SkipValues = true, prior, true
			continue
		}
		if f, ok := first[it.Event.ID]; ok {
			it.Repeat, it.Prior, it.SkipValues = true, f.Event.Outcome, true
			continue
		}
		first[it.Event.ID] = it
	}
	return nil
}

// storedBefore flags events to check whose values an earlier attempt stored
// before it could ack (a writer crash between insert and ack, a replay), or
// may have stored (an insert whose quorum is pending: Unsettled), and
// returns their ids. It asks in groups of events near each other in reading time
// (chstore.Nearby): one old reading in a batch costs a lookup of its own,
// not a scan of every reading since it.
func (c *Checker) storedBefore(ctx context.Context, items []Item) (map[string]bool, error) {
	var evs []chstore.TimedID
	entities := make(map[string][]string) // of each event to check
	for i := range items {
		it := &items[i]
		if !it.Check || it.SkipValues || len(it.Event.Values) == 0 {
			continue
		}
		evs = append(evs, chstore.TimedID{ID: it.Event.ID, Ns: it.Event.ReadingNs})
		for _, v := range it.Event.Values {
			entities[it.Event.ID] = append(entities[it.Event.ID], v.Entity)
		}
	}
	stored := make(map[string]chstore.Presence)
	err := chstore.Nearby(evs, func(ids []string, minNs, maxNs int64) error {
		var ents []string
		for _, id := range ids {
			ents = append(ents, entities[id]...)
		}
		found, err := c.stored.StoredEvents(ctx, ents, ids, minNs, maxNs)
		maps.Copy(stored, found)
		return err
	})
	if err != nil {
		return nil, err
	}
	var found map[string]bool // most flushes find none
	for i := range items {
		switch stored[items[i].Event.ID] {
		case chstore.Stored:
			items[i].SkipValues = true
		case chstore.Unsettled:
			items[i].SkipValues, items[i].Unsettled = true, true
		default:
			continue
		}
		if found == nil {
			found = make(map[string]bool)
		}
		found[items[i].Event.ID] = true
	}
	return found, nil
}
