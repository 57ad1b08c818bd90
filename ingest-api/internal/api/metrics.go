package api

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// serverMetrics are ingest-api's own series.
type serverMetrics struct {
	requests      *prometheus.CounterVec   // by outcome and status
	byCode        []prometheus.Counter     // requests' series of each outcome, resolved once
	duration      *prometheus.HistogramVec // by route
	outcomeWait   prometheus.Histogram
	publishErrors prometheus.Counter
	auditFailures prometheus.Counter
}

// NewPublishSizes is the histogram of events per JetStream message; its
// Observe is the publisher's observer.
func NewPublishSizes(reg prometheus.Registerer) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Ingest, Name: "publish_batch_events",
		Help:    "Single readings per JetStream message (the events of concurrent requests share one; keyed and unkeyed ones fill messages of their own).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 9),
	})
	metrics.Or(reg).MustRegister(h)
	return h
}

// latencyBuckets reach from a quick rejection to the outcome timeout.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .2, .5, 1, 2.5, 5, 10}

func newServerMetrics(reg prometheus.Registerer, s *Server) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "requests_total",
			Help: "Answered requests by outcome (pkg/outcome names: stored, invalid_token, storage_failed, ...) and HTTP status.",
		}, []string{"outcome", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Ingest, Name: "request_duration_seconds",
			Help: "Time from routing a request to its answer, by route template.", Buckets: latencyBuckets,
		}, []string{"route"}),
		outcomeWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Ingest, Name: "outcome_wait_seconds",
			Help: "Time from publishing an event to receiving its outcome from a worker.", Buckets: latencyBuckets,
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "publish_errors_total",
			Help: "Events JetStream did not accept (NATS down, stream full, timeout).",
		}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "audit_failures_total",
			Help: "Workspace changes made whose audit record the audit stream did not accept (each is logged).",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.outcomeWait, m.publishErrors, m.auditFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Ingest, Name: "in_flight_requests",
			Help: "Event requests being handled now (MAX_IN_FLIGHT bounds it).",
		}, func() float64 { return float64(len(s.inflight)) }),
	)
	// Every outcome's series exists from the start (alerts see zeros), and
	// the request path does no label lookup.
	for i := range outcome.NumCodes() {
		code := outcome.Code(i)
		m.byCode = append(m.byCode, m.requests.WithLabelValues(code.String(), strconv.Itoa(outcome.Lookup(code).Status)))
	}
	return m
}

// countOutcome notes one answered request.
func (m *serverMetrics) countOutcome(code outcome.Code, status int) {
	if outcome.Valid(code) && status == outcome.Lookup(code).Status {
		m.byCode[code].Inc()
		return
	}
	m.requests.WithLabelValues(code.String(), strconv.Itoa(status)).Inc()
}

// timeRoutes observes every request's duration by route; errors are handled
// here, so that the time includes writing the error answer.
func (m *serverMetrics) timeRoutes(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		return nil
	}
}
