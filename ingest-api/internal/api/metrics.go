package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/pkg/metrics"
)

// registerMetrics exports the device door's own series (the answers'
// series are edge's, shared with the workspace listener).
func registerMetrics(reg prometheus.Registerer, s *Server) {
	metrics.Or(reg).MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Ingest, Name: "in_flight_requests",
		Help: "Event requests being handled now (MAX_IN_FLIGHT bounds it).",
	}, func() float64 { return float64(len(s.inflight)) }))
}
