// Package batch gathers mapped events from every request in flight into one
// ClickHouse insert per table, answers each waiting request once its values
// are stored, and acknowledges the events only after that.
package batch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Storage is what the writer needs of ClickHouse.
type Storage interface {
	InsertValues(ctx context.Context, rows []chstore.ValueRow) error
	InsertMessages(ctx context.Context, rows []chstore.MessageRow) error
	StoredEvents(ctx context.Context, entities, ids []string, minNs, maxNs int64) (map[string]bool, error)
	InsertKeys(ctx context.Context, rows []chstore.KeyRow) error
	KeyOutcomes(ctx context.Context, ids []string, sinceNs int64) (map[string]outcome.Code, error)
	DropExpiredKeys(ctx context.Context, cutoff time.Time) (int, error)
}

var _ Storage = (*chstore.Store)(nil)

// Config tunes batching and the consumer.
type Config struct {
	// MaxBatch is the most envelopes (of up to the mapper's
	// ENVELOPE_MAX_EVENTS events each) one flush takes.
	MaxBatch int
	// Linger is how long a flush may wait for more events once it has
	// some; zero flushes whatever is buffered at once. The insert itself
	// takes time, during which the next batch gathers, so batches grow
	// with load even without lingering.
	Linger time.Duration
	// MinInterval, PacePerEvent and MaxInterval space the starts of value
	// inserts: after a batch of n events the next insert starts no sooner
	// than max(MinInterval, min(n*PacePerEvent, MaxInterval)) after it; an
	// idle writer inserts at once. ClickHouse's cost is per insert (about 5 ms of
	// server CPU for this table with its merges at 200 inserts/s, measured
	// with bench/chcost) far more than per row, so the floor bounds inserts
	// per second and the pace lets batches grow further with load.
	MinInterval  time.Duration
	PacePerEvent time.Duration
	MaxInterval  time.Duration
	// RawMaxRows and RawInterval bound the raw message log's batches.
	RawMaxRows    int
	RawInterval   time.Duration
	InsertTimeout time.Duration
	MaxAckPending int
	PullBatch     int
	AckWait       time.Duration
	// Names are the streams and subjects (main sets them from the NATS
	// configuration).
	Names bus.Names
	// KeyWindow is how long the outcome of a keyed event (one sent with an
	// Idempotency-Key) answers its retries.
	KeyWindow time.Duration
	// RetryDelay is how long a keyed envelope waits for redelivery after
	// its values could not be stored.
	RetryDelay time.Duration
}

// Writer consumes mapped events and stores them.
type Writer struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	store Storage
	log   *zap.Logger

	// answered holds the outcomes of keyed events this writer answered
	// whose event_keys rows are not inserted yet.
	mu       sync.Mutex
	answered map[string]outcome.Code

	m *writerMetrics
}

// New returns a writer; Run starts it. Its metrics go to reg (nil: not
// exported).
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, store Storage, reg prometheus.Registerer, log *zap.Logger) *Writer {
	return &Writer{cfg: cfg, nc: nc, js: js, store: store, log: log, answered: make(map[string]outcome.Code),
		m: newWriterMetrics(metrics.Or(reg))}
}

// Run consumes until ctx ends, then stops pulling, flushes what it holds and
// acks it before returning.
func (w *Writer) Run(ctx context.Context) error {
	raw := make(chan rawBatch, 64)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		w.rawLog(raw)
	}()
	err := bus.ConsumeInto(ctx, w.js, bus.Durable{
		Stream: w.cfg.Names.MappedStream, Name: w.cfg.Names.WriterConsumer, AckWait: w.cfg.AckWait,
		MaxAckPending: w.cfg.MaxAckPending, PullBatch: w.cfg.PullBatch,
	}, w.log, func(in <-chan jetstream.Msg) { w.loop(in, raw) })
	close(raw)
	<-logged
	return err
}

// loop flushes batches until in is closed and empty.
func (w *Writer) loop(in <-chan jetstream.Msg, raw chan<- rawBatch) {
	batch := make([]jetstream.Msg, 0, w.cfg.MaxBatch)
	var next time.Time
	for first := range in {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		start := time.Now()
		batch = bus.Gather(in, append(batch[:0], first), w.cfg.MaxBatch, w.cfg.Linger)
		rb, ok := w.flush(batch)
		if ok {
			raw <- rb
		}
		next = start.Add(max(w.cfg.MinInterval, min(time.Duration(len(rb.rows))*w.cfg.PacePerEvent, w.cfg.MaxInterval)))
		clear(batch)
	}
}

// item is one event of a batch.
type item struct {
	ev        event.Mapped
	check     bool // its values may be stored already (a redelivery)
	skipValue bool // they are
	// repeat is set for a keyed event an earlier attempt already answered
	// with prior: it is answered the same and stores nothing.
	repeat bool
	prior  outcome.Code
}

// flush stores one batch's values (the confirmation path) and answers; it
// returns the raw messages and the envelopes to ack once those are stored.
func (w *Writer) flush(msgs []jetstream.Msg) (rawBatch, bool) {
	taken := time.Now()
	var items []item
	var acks, keyed []jetstream.Msg
	for _, m := range msgs {
		evs, err := event.DecodeEnvelope(m.Data())
		if err != nil {
			w.log.Error("dropping unreadable envelope", zap.Error(err))
			_ = m.Term()
			continue
		}
		redelivered := false
		if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
			redelivered = true
		}
		for _, ev := range evs {
			items = append(items, item{ev: ev, check: redelivered || ev.MaybeStored})
		}
		if len(evs) > 0 && evs[0].Keyed {
			keyed = append(keyed, m)
		} else {
			acks = append(acks, m)
		}
	}
	skipRepeats(items)
	observeAges(w.m.taken, items, taken)
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.InsertTimeout)
	defer cancel()

	valuesErr := w.markRedelivered(ctx, items)
	if valuesErr == nil {
		valuesErr = w.markKeyRepeats(ctx, items)
	}
	if valuesErr != nil {
		w.m.failures.WithLabelValues(tableValues).Inc()
	} else {
		rows := valueRows(items)
		start := time.Now()
		valuesErr = w.store.InsertValues(ctx, rows)
		w.m.observeInsert(tableValues, len(rows), start, valuesErr)
		if valuesErr == nil {
			observeAges(w.m.stored, items, time.Now())
		}
	}
	w.m.batchEvents.Observe(float64(len(items)))
	if valuesErr != nil {
		w.log.Warn("values not stored", zap.Int("events", len(items)), zap.Error(valuesErr))
	}

	var answers event.Replies
	rb := rawBatch{rows: make([]chstore.MessageRow, 0, len(items))}
	for i := range items {
		it := &items[i]
		code := it.ev.Outcome
		switch {
		case valuesErr != nil && (code == outcome.Stored || it.ev.Keyed):
			code = outcome.StorageFailed
		case it.repeat:
			code = it.prior
			w.m.keyedRepeats.Inc()
		}
		if code == outcome.Stored || code == outcome.StorageFailed || it.ev.Keyed {
			w.m.answered.WithLabelValues(code.String()).Inc()
			answers.Add(it.ev.Reply, event.Reply{ID: it.ev.ID, Code: code, Detail: storageDetail(valuesErr)})
		}
		if it.ev.Keyed && (valuesErr != nil || it.repeat) {
			// Retried until stored, or a retry of what is logged already.
			continue
		}
		rb.rows = append(rb.rows, chstore.MessageRow{
			Serial: it.ev.Serial, TsNs: it.ev.ReceivedNs, EventID: it.ev.ID, Payload: it.ev.Payload,
			Outcome: outcome.Lookup(code).Message,
		})
		if it.ev.Keyed {
			rb.keys = append(rb.keys, chstore.KeyRow{EventID: it.ev.ID, TsNs: it.ev.ReceivedNs, Outcome: code})
		}
	}
	w.remember(rb.keys)
	if err := answers.Send(w.nc); err != nil {
		w.log.Warn("send outcomes", zap.Error(err))
	}
	if valuesErr != nil {
		// Devices without a key were told nothing was stored and will
		// retry: storing these events later would store them twice.
		// Their raw messages (outcome: failed to store) are best effort.
		// Keyed events are retried here until stored, and a device's
		// retry learns their outcome.
		for _, m := range acks {
			_ = m.Term()
		}
		for _, m := range keyed {
			_ = m.NakWithDelay(w.cfg.RetryDelay)
		}
		acks, keyed = nil, nil
	}
	rb.acks = append(acks, keyed...)
	return rb, len(rb.rows) > 0 || len(rb.acks) > 0
}

// markKeyRepeats finds keyed events an earlier attempt already answered:
// those this writer answered moments ago, those in event_keys within the
// window, and later copies of one event within this batch (a device retried
// while the first attempt was still on its way).
func (w *Writer) markKeyRepeats(ctx context.Context, items []item) error {
	var ids []string
	w.mu.Lock()
	for i := range items {
		it := &items[i]
		if !it.ev.Keyed {
			continue
		}
		if code, ok := w.answered[it.ev.ID]; ok {
			it.repeat, it.prior, it.skipValue = true, code, true
			continue
		}
		ids = append(ids, it.ev.ID)
	}
	w.mu.Unlock()
	if len(ids) > 0 {
		found, err := w.store.KeyOutcomes(ctx, ids, time.Now().Add(-w.cfg.KeyWindow).UnixNano())
		if err != nil {
			return err
		}
		for i := range items {
			it := &items[i]
			if code, ok := found[it.ev.ID]; ok && !it.repeat {
				it.repeat, it.prior, it.skipValue = true, code, true
			}
		}
	}
	first := make(map[string]*item)
	for i := range items {
		it := &items[i]
		if !it.ev.Keyed || it.repeat {
			continue
		}
		if f, ok := first[it.ev.ID]; ok {
			it.repeat, it.prior, it.skipValue = true, f.ev.Outcome, true
			continue
		}
		first[it.ev.ID] = it
	}
	return nil
}

// remember notes keyed outcomes until their event_keys rows are stored.
func (w *Writer) remember(keys []chstore.KeyRow) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	for _, k := range keys {
		w.answered[k.EventID] = k.Outcome
	}
	w.mu.Unlock()
}

func (w *Writer) forget(keys []chstore.KeyRow) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	for _, k := range keys {
		delete(w.answered, k.EventID)
	}
	w.mu.Unlock()
}

// Outcomes answers a device's retry with the outcomes earlier attempts of
// keyed events were answered with, for those of ids that have one.
func (w *Writer) Outcomes(ctx context.Context, ids []string) (map[string]outcome.Code, error) {
	found, err := w.store.KeyOutcomes(ctx, ids, time.Now().Add(-w.cfg.KeyWindow).UnixNano())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	for _, id := range ids {
		if code, ok := w.answered[id]; ok {
			found[id] = code
		}
	}
	w.mu.Unlock()
	return found, nil
}

// ExpireKeys drops days of event_keys that are past the window, every
// interval until ctx ends. Lookups ignore expired rows anyway: this bounds
// the table.
func (w *Writer) ExpireKeys(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, w.cfg.InsertTimeout)
		n, err := w.store.DropExpiredKeys(qctx, time.Now().Add(-w.cfg.KeyWindow))
		cancel()
		switch {
		case err != nil:
			w.log.Warn("expire event keys", zap.Error(err))
		case n > 0:
			w.log.Info("expired event keys", zap.Int("days", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// skipRepeats keeps one copy of an event that two envelopes of the same
// batch carry (the mapper regrouped it after a redelivery): the check against
// ClickHouse cannot see a copy that is not inserted yet.
func skipRepeats(items []item) {
	seen := make(map[string]struct{}, len(items))
	for i := range items {
		id := items[i].ev.ID
		if _, dup := seen[id]; dup {
			items[i].skipValue = true
			continue
		}
		seen[id] = struct{}{}
	}
}

// valueRows lists the values to insert: those of stored-outcome events not
// already in ClickHouse.
func valueRows(items []item) []chstore.ValueRow {
	n := 0
	for i := range items {
		n += len(items[i].ev.Values)
	}
	rows := make([]chstore.ValueRow, 0, n)
	for i := range items {
		it := &items[i]
		if it.ev.Outcome != outcome.Stored || it.skipValue {
			continue
		}
		for _, v := range it.ev.Values {
			rows = append(rows, chstore.ValueRow{
				Entity: v.Entity, Input: v.Input, TsNs: it.ev.ReceivedNs, Serial: it.ev.Serial,
				DeviceInput: v.DeviceInput, EventID: it.ev.ID, JSON: v.JSON,
			})
		}
	}
	return rows
}

// markRedelivered flags redelivered events whose values a previous attempt
// stored before it could ack (a writer crash between insert and ack).
func (w *Writer) markRedelivered(ctx context.Context, items []item) error {
	var ids, entities []string
	var minNs, maxNs int64
	for i := range items {
		it := &items[i]
		if !it.check || len(it.ev.Values) == 0 {
			continue
		}
		ids = append(ids, it.ev.ID)
		for _, v := range it.ev.Values {
			entities = append(entities, v.Entity)
		}
		if minNs == 0 || it.ev.ReceivedNs < minNs {
			minNs = it.ev.ReceivedNs
		}
		maxNs = max(maxNs, it.ev.ReceivedNs)
	}
	if len(ids) == 0 {
		return nil
	}
	stored, err := w.store.StoredEvents(ctx, entities, ids, minNs, maxNs)
	if err != nil {
		return err
	}
	for i := range items {
		if stored[items[i].ev.ID] {
			items[i].skipValue = true
		}
	}
	return nil
}

func storageDetail(err error) string {
	if err == nil {
		return ""
	}
	return "storage error: " + err.Error()
}
