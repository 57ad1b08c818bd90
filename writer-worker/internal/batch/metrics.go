package batch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"

	"github.com/devicehub/eventservice/pkg/metrics"
)

// Tables, as metric labels.
const (
	tableValues   = "input_values"
	tableMessages = "device_messages"
	tableKeys     = "event_keys"
	tableMarks    = "rollup_dirty"
)

// writerMetrics are writer-worker's own series.
type writerMetrics struct {
	batchEvents    prometheus.Histogram
	insertDuration *prometheus.HistogramVec // by table
	rows           *prometheus.CounterVec   // by table
	failures       *prometheus.CounterVec   // by table
	keyedRepeats   prometheus.Counter
	diskFull       prometheus.Counter
	taken, stored  prometheus.Observer                   // event age by stage
	answered       *prometheus.CounterVec                // by outcome
	verdicts       [len(verdictNames)]prometheus.Counter // by verdict (claims.go)
	unread         prometheus.Counter                    // envelopes sent back for an entry not read
}

func newWriterMetrics(reg prometheus.Registerer) *writerMetrics {
	m := &writerMetrics{
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Writer, Name: "batch_events",
			Help:    "Events per value flush (one INSERT into input_values).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		insertDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Writer, Name: "insert_duration_seconds",
			Help:    "Time one INSERT took, by table.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"table"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "rows_stored_total",
			Help: "Rows inserted, by table.",
		}, []string{"table"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "storage_failures_total",
			Help: "Failed INSERTs or lookups, by table.",
		}, []string{"table"}),
		diskFull: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "disk_full_failures_total",
			Help: "Failed INSERTs that found ClickHouse's disk full (retried until space is freed).",
		}),
		keyedRepeats: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "keyed_repeats_total",
			Help: "Keyed events answered with an earlier attempt's outcome instead of being stored again.",
		}),
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Writer, Name: "outcomes_total",
			Help: "Outcomes this writer sent back to waiting requests, by outcome.",
		}, []string{"outcome"}),
	}
	age := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Writer, Name: "event_age_seconds",
		Help: "Time since ingest-api received an event (its clock: keep the hosts' clocks in sync), when this writer " +
			"took it into a batch (stage=taken) and when its values were stored (stage=stored).",
		Buckets: latencyBuckets,
	}, []string{"stage"})
	m.taken, m.stored = age.WithLabelValues("taken"), age.WithLabelValues("stored")
	verdicts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Writer, Name: "claim_verdicts_total",
		Help: "Keyed events of envelopes tagged with their claims log entry, by what this writer did with them: " +
			"keep (the entry holds the claim, or a replay, or older than the window: stored), release (an earlier attempt holds it: dropped, its claim released), " +
			"drop (not known, first delivery: dropped), if_stored (not known, perhaps stored by an earlier delivery: answered only if found).",
	}, []string{"verdict"})
	for v, name := range verdictNames {
		m.verdicts[v] = verdicts.WithLabelValues(name)
	}
	m.unread = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Writer, Name: "claim_entries_unread_total",
		Help: "Envelopes sent back (NotReady) because this writer had not read their claims log entry yet.",
	})
	reg.MustRegister(age, verdicts, m.unread)
	reg.MustRegister(m.batchEvents, m.insertDuration, m.rows, m.failures, m.keyedRepeats, m.diskFull, m.answered)
	// Every series exists from the start, so that rates and alerts see
	// zero rather than nothing.
	for _, t := range []string{tableValues, tableMessages, tableKeys, tableMarks} {
		m.insertDuration.WithLabelValues(t)
		m.rows.WithLabelValues(t)
		m.failures.WithLabelValues(t)
	}
	return m
}

// latencyBuckets reach from a quick pass to the outcome timeout.
var latencyBuckets = []float64{.001, .0025, .005, .01, .015, .02, .025, .03, .04, .05, .075, .1, .2, .5, 1, 2.5, 5}

// observeAges records the age of each event at the time given.
func (m *writerMetrics) observeAges(o prometheus.Observer, items []dedupe.Item, at time.Time) {
	ns := at.UnixNano()
	for i := range items {
		o.Observe(float64(ns-items[i].Event.ReceivedNs) / 1e9)
	}
}

// observeInsert records one INSERT of n rows into table that started at start.
func (m *writerMetrics) observeInsert(table string, n int, start time.Time, err error) {
	if n == 0 && err == nil {
		return
	}
	m.insertDuration.WithLabelValues(table).Observe(time.Since(start).Seconds())
	if err != nil {
		m.failures.WithLabelValues(table).Inc()
		if chstore.DiskFull(err) {
			m.diskFull.Inc()
		}
		return
	}
	m.rows.WithLabelValues(table).Add(float64(n))
}
