package mapping

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// workerMetrics are mapper-worker's own series.
type workerMetrics struct {
	events         *prometheus.CounterVec // by outcome
	envelopes      prometheus.Counter
	envelopeEvents prometheus.Histogram
	publishErrors  prometheus.Counter
	republished    prometheus.Counter
	inProcess      prometheus.Counter
	staleWaits     prometheus.Counter
}

func newWorkerMetrics(reg prometheus.Registerer) *workerMetrics {
	m := &workerMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "events_total",
			Help: "Events resolved, by outcome (stored: has connected inputs; no_connections; device_not_found and processing_failed end here).",
		}, []string{"outcome"}),
		envelopes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "envelopes_published_total",
			Help: "Envelopes (batches of mapped events) published to the writer's stream.",
		}),
		envelopeEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Mapper, Name: "envelope_events",
			Help:    "Mapped events per published envelope.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "publish_errors_total",
			Help: "Envelopes the stream did not accept; their messages are retried as the settlement policy says.",
		}),
		republished: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "envelopes_republished_total",
			Help: "Envelopes whose ack did not come, published again with the same message id and then acknowledged (the stream keeps one copy).",
		}),
		inProcess: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "envelopes_id_in_process_total",
			Help: "Envelopes the stream refused on every re-publish as a message id in process (a proposal it may never apply), sent under another id.",
		}),
		staleWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Mapper, Name: "registry_stale_waits_total",
			Help: "Events put back because this copy of the registry had not yet seen the record they were accepted under.",
		}),
	}
	reg.MustRegister(m.events, m.envelopes, m.envelopeEvents, m.publishErrors, m.republished, m.inProcess, m.staleWaits)
	for _, c := range []outcome.Code{outcome.Stored, outcome.NoConnections, outcome.DeviceNotFound, outcome.ProcessingFailed} {
		m.events.WithLabelValues(c.String())
	}
	return m
}
