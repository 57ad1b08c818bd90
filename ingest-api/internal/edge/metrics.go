package edge

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// requestMetrics are the answers' series, of both listeners.
type requestMetrics struct {
	requests *prometheus.CounterVec   // by outcome and status
	byCode   []prometheus.Counter     // requests' series of each outcome, resolved once
	duration *prometheus.HistogramVec // by route
}

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "requests_total",
			Help: "Answered requests by outcome (pkg/outcome names: stored, invalid_token, storage_failed, ...) and HTTP status.",
		}, []string{"outcome", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Ingest, Name: "request_duration_seconds",
			Help: "Time from routing a request to its answer, by route template.", Buckets: metrics.LatencyBuckets,
		}, []string{"route"}),
	}
	metrics.Or(reg).MustRegister(m.requests, m.duration)
	// Every outcome's series exists from the start (alerts see zeros), and
	// the request path does no label lookup.
	for i := range outcome.NumCodes() {
		code := outcome.Code(i)
		m.byCode = append(m.byCode, m.requests.WithLabelValues(code.String(), strconv.Itoa(outcome.Lookup(code).Status)))
	}
	return m
}

// countOutcome notes one answered request.
func (m *requestMetrics) countOutcome(code outcome.Code, status int) {
	if outcome.Valid(code) && status == outcome.Lookup(code).Status {
		m.byCode[code].Inc()
		return
	}
	m.requests.WithLabelValues(code.String(), strconv.Itoa(status)).Inc()
}

// TimeRoutes observes every request's duration by route; errors are handled
// here, so that the time includes writing the error answer.
func (s *Answers) TimeRoutes(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		return nil
	}
}
