// Package batch gathers mapped events from every request in flight into one
// ClickHouse insert per table, answers each waiting request once its values
// are stored, and settles the envelopes (pkg/settle) only after that.
package batch

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
	"github.com/devicehub/eventservice/writer-worker/internal/idem"
)

// Writer consumes mapped events and stores them.
type Writer struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	store  *chstore.Store
	keys   *idem.Record
	claims Claims
	frees  *freer // while Run runs
	checks *dedupe.Checker
	settle *settle.Settler
	log    *zap.Logger
	// consuming is set once this copy pulls from its consumer.
	consuming atomic.Bool
	// events counts the events this copy has flushed.
	events atomic.Uint64
	m      *writerMetrics
}

// New returns a writer; Run starts it. keys is the record of keyed
// outcomes it writes and checks, claims its reading of the claims log
// (claims.go). Its metrics go to reg (nil: not exported).
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, store *chstore.Store, keys *idem.Record, claims Claims, reg prometheus.Registerer, log *zap.Logger) *Writer {
	reg = metrics.Or(reg)
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Writer, Name: "keyed_first_attempts_total",
			Help: "Keyed events known for first attempts by the filter of keys seen: stored without a lookup of event_keys."},
			func() float64 { f, _ := keys.Counts(); return float64(f) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Writer, Name: "key_lookups_total",
			Help: "Queries of event_keys for the outcomes of earlier attempts (keyed events not known for first attempts, and the reads of ingest-api's retries)."},
			func() float64 { _, l := keys.Counts(); return float64(l) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Writer, Name: "clickhouse_failovers_total",
			Help: "Moves from one ClickHouse replica of CLICKHOUSE_URL to the next: the current one was unreachable, read-only (cut from ZooKeeper) or behind the quorum."},
			func() float64 { return float64(store.Failovers()) }))
	return &Writer{cfg: cfg, nc: nc, js: js, store: store, keys: keys, claims: claims, checks: dedupe.New(store, keys), log: log,
		m: newWriterMetrics(reg), settle: settle.New(js, cfg.Names, cfg.Limits, metrics.Writer, reg, log)}
}

// Consuming reports whether this copy pulls from its consumer yet.
func (w *Writer) Consuming() bool { return w.consuming.Load() }

// Events is how many events this copy has flushed: how busy live ingestion
// is, for the backfills that make way for it.
func (w *Writer) Events() uint64 { return w.events.Load() }

// Run consumes until ctx ends, then stops pulling, flushes what it holds and
// settles it before returning.
func (w *Writer) Run(ctx context.Context) error {
	w.frees = newFreer(w.claims, w.log)
	defer w.frees.close()
	// The raw message log batches the flushes' raw messages: one insert
	// per RawInterval or RawMaxRows.
	raw := batcher.New(batcher.Config{MaxSize: w.cfg.RawMaxRows, MaxItems: math.MaxInt, Linger: w.cfg.RawInterval},
		func(b rawBatch) int { return len(b.rows) }, w.logRaw)
	rawCtx, stopRaw := context.WithCancel(context.Background())
	logged := make(chan error, 1)
	go func() { logged <- raw.Run(rawCtx) }()
	// A value batch is whatever arrived while the last insert ran and the
	// pause after it: after a batch of n events the next starts no sooner
	// than max(MIN_INTERVAL, min(n*PACE_PER_EVENT, MAX_INTERVAL)) later.
	err := bus.ConsumeBatches(ctx, w.js, bus.Durable{
		Stream: w.cfg.Names.MappedStream, Name: w.cfg.Names.WriterConsumer, ConsumerConfig: w.cfg.Consumer,
		Consuming: func() { w.consuming.Store(true) },
	}, w.log, batcher.Config{MaxItems: w.cfg.MaxBatch, Linger: w.cfg.Linger}, func(b *batcher.Batch[jetstream.Msg], release func(time.Duration)) {
		rb, events := w.flush(b.Items)
		w.events.Add(uint64(events))
		if len(rb.rows) > 0 || len(rb.keys) > 0 || len(rb.marks) > 0 || len(rb.acks) > 0 {
			_ = raw.Add(rb) // unbounded, and stopped only after this
		}
		release(max(w.cfg.MinInterval, min(time.Duration(events)*w.cfg.PacePerEvent, w.cfg.MaxInterval)))
	})
	stopRaw()
	<-logged
	return err
}
