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
	auditFailures prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer, s *Server) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "requests_total",
			Help: "Answered requests by outcome (pkg/outcome names: stored, invalid_token, storage_failed, ...) and HTTP status.",
		}, []string{"outcome", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Ingest, Name: "request_duration_seconds",
			Help: "Time from routing a request to its answer, by route template.", Buckets: metrics.LatencyBuckets,
		}, []string{"route"}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "audit_failures_total",
			Help: "Workspace changes made whose audit record the audit stream did not accept (each is logged).",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.auditFailures,
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
