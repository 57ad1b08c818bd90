package batch

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/reply"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
)

// source is one envelope of a batch.
type source struct {
	msg   *settle.Msg
	items []int // its events, indexes into the batch's items
	// tag names the claims log entry the envelope is tagged with ("":
	// none); free are the claims of the events dropped (claims.go).
	tag  string
	free []string
}

// A batch's events are items []dedupe.Item with errs []error beside them:
// errs[i] is why item i's values are not stored (nil: stored, or nothing to
// store); a permanent one is that event's alone (see isolate).

// needsStore reports whether the event's outcome waits on this batch's
// inserts: its values, or (keyed) the record of its outcome.
func needsStore(it *dedupe.Item) bool {
	return (it.Event.Outcome == outcome.Stored || it.Event.Keyed) && !it.Repeat && !it.Drop
}

var errExhausted = errors.New("delivered more often than MAX_DELIVER without being settled")

// flush stores one batch's values (the confirmation path), answers, and
// settles every envelope; those to ack are held in the returned raw batch
// until their raw messages are stored. It also returns the batch's event
// count.
func (w *Writer) flush(msgs []jetstream.Msg) (rawBatch, int) {
	taken := time.Now()
	srcs, items := w.decode(msgs, taken)
	w.m.observeAges(w.m.taken, items, taken)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.InsertTimeout)
	defer cancel()

	errs := make([]error, len(items))
	err := w.checks.Mark(ctx, items)
	if err != nil {
		w.m.failures.WithLabelValues(tableValues).Inc()
	} else {
		err = w.storeValues(ctx, items, errs)
	}
	if err == nil {
		if merr := w.markLate(ctx, items, errs, taken); merr != nil {
			// The values are stored: answering them failed would have
			// unkeyed devices send them again. Their marks follow with
			// the raw messages; until then a chart may miss them.
			w.log.Warn("late readings not marked before their answer", zap.Error(merr))
		}
	}
	w.m.batchEvents.Observe(float64(len(items)))
	if err != nil {
		w.log.Warn("values not stored", zap.Int("events", len(items)), zap.Error(err))
		for i := range items {
			if needsStore(&items[i]) && errs[i] == nil {
				errs[i] = err
			}
		}
	} else {
		w.m.observeAges(w.m.stored, items, time.Now())
	}

	var answers reply.Replies
	rb := rawBatch{rows: make([]chstore.MessageRow, 0, len(items))}
	for _, src := range srcs {
		w.settleSource(src, items, errs, &answers, &rb)
	}
	rb.remembered = w.keys.Remember(rb.keys)
	answers.Send(w.nc, w.log)
	return rb, len(items)
}

// markLate marks, before they are answered, the minutes of the stored
// readings whose time is older than chstore.RollupLag: the rollup may have
// passed their minutes, and a chart must read them from the readings until
// it computes them again. Newer ones are marked with the raw messages.
func (w *Writer) markLate(ctx context.Context, items []dedupe.Item, errs []error, now time.Time) error {
	var marks []chstore.Mark
	var seen map[chstore.Mark]bool // made for the first late reading: most batches have none
	late := now.Add(-chstore.RollupLag).UnixNano()
	for i := range items {
		ev := &items[i].Event
		if errs[i] != nil || ev.Outcome != outcome.Stored || items[i].Repeat || items[i].Drop || ev.ReadingNs >= late {
			continue
		}
		for _, v := range ev.Values {
			if m := chstore.MarkOf(v.Entity, v.Input, ev.ReadingNs); !seen[m] {
				if seen == nil {
					seen = make(map[chstore.Mark]bool)
				}
				seen[m] = true
				marks = append(marks, m)
			}
		}
	}
	if len(marks) == 0 {
		return nil
	}
	start := time.Now()
	err := w.store.InsertMarks(ctx, start.UnixNano(), marks)
	w.m.observeInsert(tableMarks, len(marks), start, err)
	return err
}

// redeliveryAge is the age past which an event is checked against
// ClickHouse even on its first delivery: the pipeline carries an event in
// milliseconds, so one accepted this long ago may be a redelivery whose
// count a NATS node lost (power lost before it synced the acks: delivery
// counts restart at 1). Only events delayed by a fault or a backlog pay
// the lookup, one per batch.
const redeliveryAge = 2 * time.Second

// decode reads the batch's envelopes; one that cannot be read, or that has
// been delivered too often, goes to the dead letters here. Events to check
// (dedupe.Item.Check) are those redelivered, seen twice by the mapper,
// replayed, or older than redeliveryAge at now; or received more than
// redeliveryAge after now: by an ingest-api copy whose clock is ahead of
// this one's (a clock stepped, or drifting), so its age cannot be told.
func (w *Writer) decode(msgs []jetstream.Msg, now time.Time) ([]source, []dedupe.Item) {
	old, ahead := now.Add(-redeliveryAge).UnixNano(), now.Add(redeliveryAge).UnixNano()
	var decideBy waitBudget
	var items []dedupe.Item
	srcs := make([]source, 0, len(msgs))
	for _, jm := range msgs {
		m := w.settle.Take(jm)
		if m.Exhausted() {
			m.Settle(settle.Exhausted, errExhausted) // nobody waits for an envelope this old
			continue
		}
		evs, err := event.DecodeEnvelope(m.Data())
		if err != nil {
			m.Settle(settle.StoreFailed, failure.AsPermanent(err))
			continue
		}
		delivered, replay, claimed := m.Delivered(), m.Replay(), m.Header(bus.ClaimedHeader) == "1"
		m.SetKeyed(len(evs) > 0 && evs[0].Keyed)
		src := source{msg: m, tag: m.Header(bus.ClaimTagHeader)}
		var entry claimlog.Entry
		var state entryState
		if claimed && src.tag != "" && len(evs) > 0 {
			if entry, state = w.entryOf(decideBy.ctx, src.tag, delivered); state == entryWait {
				m.Settle(settle.NotReady, nil) // back once the entry may be read
				w.m.unread.Inc()
				continue
			}
		}
		for _, ev := range evs {
			ev.Replay = ev.Replay || replay
			check := delivered > 1 || ev.MaybeStored || ev.Replay || ev.ReceivedNs < old || ev.ReceivedNs > ahead
			it := dedupe.Item{Event: ev, Check: check, Claimed: claimed}
			if claimed && src.tag != "" && !w.judge(&src, &it, verdictOf(entry, state, &ev, check)) {
				continue
			}
			src.items = append(src.items, len(items))
			items = append(items, it)
		}
		if len(src.items) == 0 {
			// Every event dropped: acked now, its claims released after.
			m.Settle(settle.Done, nil)
			w.freeClaims(src)
			continue
		}
		srcs = append(srcs, src)
	}
	return srcs, items
}

// settleSource answers one envelope's events and settles it as the policy
// says, in one decision: events rejected for good go to the dead letters on
// their own, the envelope follows the rest. An ack is held until the raw
// message log has the envelope's rows (logRaw releases it).
func (w *Writer) settleSource(src source, items []dedupe.Item, errs []error, answers *reply.Replies, rb *rawBatch) {
	var rejected []event.Mapped
	var rejectErr, failErr error
	unsettled := false
	for _, i := range src.items {
		if items[i].Drop {
			continue
		}
		unsettled = unsettled || items[i].Unsettled
		switch err := errs[i]; {
		case err == nil:
		case failure.KindOf(err) == failure.Permanent:
			rejected, rejectErr = append(rejected, items[i].Event), err
		default:
			failErr = err
		}
	}
	if len(rejected) > 0 && src.msg.DeadLetterPart(event.AppendEnvelope(nil, rejected), rejectErr) != nil {
		return // the envelope was put back whole; its events are answered when it comes again
	}
	result := settle.Done
	switch {
	case failErr != nil:
		result = settle.StoreFailed
	case unsettled:
		// An earlier insert of an event's values awaits its quorum: the
		// envelope comes back once it may be decided; its requests wait.
		result = settle.NotReady
	}
	d := src.msg.Decide(result, failErr)
	for _, i := range src.items {
		it := &items[i]
		if it.Drop {
			continue // its claim not known held, and not stored before
		}
		code, answer := w.answerFor(it, errs[i], d)
		if answer {
			w.m.answered.WithLabelValues(code.String()).Inc()
			answers.Add(it.Event.Reply, event.Reply{ID: it.Event.ID, Code: code, Detail: storageDetail(errs[i])})
		}
		if d.Action == settle.Retry || (it.Event.Keyed && it.Repeat) {
			continue // answered for good already, or to be tried again
		}
		if it.Event.Keyed {
			// A retry of its key learns this outcome; the raw message is
			// logged only with the outcome that stands.
			rb.keys = append(rb.keys, chstore.KeyRow{EventID: it.Event.ID, TsNs: it.Event.ReceivedNs, Outcome: code})
			if code == outcome.StorageFailed {
				continue
			}
		}
		if errs[i] == nil && it.Event.Outcome == outcome.Stored {
			for _, v := range it.Event.Values {
				rb.marks = append(rb.marks, chstore.MarkOf(v.Entity, v.Input, it.Event.ReadingNs))
			}
		}
		rb.rows = append(rb.rows, chstore.MessageRow{
			Serial: it.Event.Serial, TsNs: it.Event.ReceivedNs, EventID: it.Event.ID, Payload: it.Event.Payload,
			Outcome: outcome.Lookup(code).Message, ReadingNs: it.Event.ReadingNs, TimeNote: it.Event.TimeNote, Token: it.Event.Token,
		})
	}
	if d.Action == settle.Ack {
		src.msg.Hold(d)
		rb.acks = append(rb.acks, src.msg)
		if len(src.free) > 0 {
			rb.frees = append(rb.frees, freeing{tag: src.tag, ids: src.free})
		}
		return
	}
	src.msg.Apply(d, failErr)
}

// answerFor is the code an event is answered with under decision d, and
// whether it is answered now.
func (w *Writer) answerFor(it *dedupe.Item, err error, d settle.Decision) (outcome.Code, bool) {
	switch {
	case err != nil && failure.KindOf(err) == failure.Permanent:
		return outcome.StorageFailed, true // its own dead letter
	case it.Repeat:
		w.m.keyedRepeats.Inc()
		return it.Prior, true
	case !needsStore(it):
		return it.Event.Outcome, true // final whatever the inserts did
	case d.Answer == settle.AnswerOutcome:
		return it.Event.Outcome, true
	case d.Answer == settle.AnswerFailure:
		return outcome.StorageFailed, true
	}
	return 0, false
}

// storageDetail is the device's answer to a failed insert: the contract's
// "storage error: " and the condition, never ClickHouse's text (addresses,
// table names); the error itself is logged and counted.
func storageDetail(err error) string {
	if err == nil {
		return ""
	}
	return "storage error: " + chstore.Condition(err)
}
