// Package batch gathers mapped events from every request in flight into one
// ClickHouse insert per table, answers each waiting request once its values
// are stored, and settles the envelopes (pkg/settle) only after that.
package batch

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
	"github.com/devicehub/eventservice/writer-worker/internal/idem"
)

// Storage is what the writer needs of ClickHouse.
type Storage interface {
	dedupe.Stored
	InsertValues(ctx context.Context, rows []chstore.ValueRow) error
	InsertMessages(ctx context.Context, rows []chstore.MessageRow) error
	InsertKeys(ctx context.Context, rows []chstore.KeyRow) error
}

var _ Storage = (*chstore.Store)(nil)

// Writer consumes mapped events and stores them.
type Writer struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	store  Storage
	keys   *idem.Record
	checks *dedupe.Checker
	settle *settle.Settler
	log    *zap.Logger
	// consuming is set once this copy pulls from its consumer.
	consuming atomic.Bool
	m         *writerMetrics
}

// New returns a writer; Run starts it. keys is the record of keyed
// outcomes it writes and checks. Its metrics go to reg (nil: not exported).
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, store Storage, keys *idem.Record, reg prometheus.Registerer, log *zap.Logger) *Writer {
	reg = metrics.Or(reg)
	return &Writer{cfg: cfg, nc: nc, js: js, store: store, keys: keys, checks: dedupe.New(store, keys), log: log,
		m: newWriterMetrics(reg), settle: settle.New(js, cfg.Names, cfg.Limits, metrics.Writer, reg, log)}
}

// Consuming reports whether this copy pulls from its consumer yet.
func (w *Writer) Consuming() bool { return w.consuming.Load() }

// Run consumes until ctx ends, then stops pulling, flushes what it holds and
// settles it before returning.
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
		Consuming: func() { w.consuming.Store(true) },
	}, w.log, func(in <-chan jetstream.Msg) { w.loop(in, raw) })
	close(raw)
	<-logged
	return err
}

// loop flushes batches until in is closed and empty, pacing the starts of
// value inserts by the size of the last batch.
func (w *Writer) loop(in <-chan jetstream.Msg, raw chan<- rawBatch) {
	batch := make([]jetstream.Msg, 0, w.cfg.MaxBatch)
	var next time.Time
	for first := range in {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		start := time.Now()
		batch = bus.Gather(in, append(batch[:0], first), w.cfg.MaxBatch, w.cfg.Linger)
		rb, events := w.flush(batch)
		if len(rb.rows) > 0 || len(rb.keys) > 0 || len(rb.acks) > 0 {
			raw <- rb
		}
		next = start.Add(max(w.cfg.MinInterval, min(time.Duration(events)*w.cfg.PacePerEvent, w.cfg.MaxInterval)))
		clear(batch)
	}
}
