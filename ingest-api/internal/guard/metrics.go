package guard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/devicehub/eventservice/pkg/metrics"
)

// RegisterMetrics exports the front door's state: how an operator sees an
// attack (docs/operations.md).
func RegisterMetrics(reg prometheus.Registerer, c *Conns, f *Failures, b *Budget) {
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: metrics.Ingest, Name: name, Help: help}, v)
	}
	counter := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Ingest, Name: name, Help: help}, v)
	}
	refused := func(reason string, v func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Ingest, Name: "connections_refused_total",
			Help:        "Connections answered and closed at once: their address held SOURCE_MAX_CONNS (reason source), or MAX_CONNS were open and every one was handling a request (reason max_conns).",
			ConstLabels: prometheus.Labels{"reason": reason}}, v)
	}
	reg.MustRegister(
		gauge("open_connections", "Connections open now (MAX_CONNS bounds them).", func() float64 { return float64(c.Stats().Open) }),
		refused("source", func() float64 { return float64(c.Stats().RefusedSource) }),
		refused("max_conns", func() float64 { return float64(c.Stats().RefusedTotal) }),
		counter("connections_evicted_total", "Connections closed to make room at MAX_CONNS: the one longest without a request handled (idle keep-alive, or still sending headers).",
			func() float64 { return float64(c.Stats().Evicted) }),
		gauge("auth_failure_sources", "Client addresses (and, past 65,536 of them, address ranges) with failed authentications in their window.", func() float64 { return float64(f.Stats().Tracked) }),
		gauge("refused_sources", "Client addresses and ranges refused now for failing authentication SOURCE_AUTH_FAILURES times.", func() float64 { return float64(f.Stats().Refused) }),
		counter("auth_failures_untracked_total", "Failed authentications counted against a range of their address (the /24 or /48, then wider) because the table of addresses was full: an attack spread over more than 65,536 addresses.",
			func() float64 { return float64(f.Stats().Untracked) }),
		gauge("body_memory_bytes", "Bytes request bodies hold now, with their copies (MAX_BODY_MEMORY bounds it).", func() float64 { return float64(b.Used()) }),
	)
}
