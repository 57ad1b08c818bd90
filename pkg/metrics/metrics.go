// Package metrics holds what the three programs share for Prometheus: a
// registry per process (no global state), the /metrics handler, and
// collectors for the device registry copy and a JetStream consumer. Metric
// names are <program>_<thing>_<unit>.
package metrics

import (
	"context"
	"net/http"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/version"
)

// Namespaces: the metric name prefix of each program.
const (
	Ingest = "ingest_api"
	Mapper = "mapper_worker"
	Writer = "writer_worker"
)

// LatencyBuckets reach from a quick rejection to the outcome timeout.
var LatencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .2, .5, 1, 2.5, 5, 10}

// NewRegistry returns a registry holding the Go runtime and process
// metrics, and <namespace>_build_info: 1, labelled with the release, the
// commit and the Go version.
func NewRegistry(namespace string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "build_info",
		Help:        "Always 1: the release, commit and Go version this process runs.",
		ConstLabels: prometheus.Labels{"version": version.Version, "revision": version.Revision(), "goversion": runtime.Version()}})
	info.Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info)
	return reg
}

// Handler serves reg in the Prometheus text format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// Or returns reg, or a throwaway registry when reg is nil (tests that do not
// look at metrics).
func Or(reg prometheus.Registerer) prometheus.Registerer {
	if reg == nil {
		return prometheus.NewRegistry()
	}
	return reg
}

// WatchRegistry exports the size of this process's registry copy and the age
// of its last change.
func WatchRegistry(reg prometheus.Registerer, namespace string, cache *registry.Cache) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "registry_devices",
			Help: "Devices in this process's copy of the registry.",
		}, func() float64 { return float64(cache.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: namespace, Name: "registry_last_update_age_seconds",
			Help: "Seconds since a device record last changed in this copy (-1: never).",
		}, func() float64 {
			t := cache.LastChange()
			if t.IsZero() {
				return -1
			}
			return time.Since(t).Seconds()
		}),
	)
}

// consumerCollector reads a durable consumer's state from JetStream when
// scraped.
type consumerCollector struct {
	js                               jetstream.JetStream
	stream, durable                  string
	pending, ackPending, redelivered *prometheus.Desc
	delivered, up                    *prometheus.Desc
}

// WatchConsumer exports the backlog of the durable consumer this program
// shares with its other copies: messages not yet delivered, delivered but
// unacknowledged, and redelivered.
func WatchConsumer(reg prometheus.Registerer, namespace string, js jetstream.JetStream, stream, durable string) {
	labels := prometheus.Labels{"stream": stream, "consumer": durable}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "consumer", name), help, nil, labels)
	}
	reg.MustRegister(&consumerCollector{
		js: js, stream: stream, durable: durable,
		pending:     desc("pending_messages", "Messages in the stream not yet delivered to the consumer (the lag)."),
		ackPending:  desc("ack_pending_messages", "Messages delivered and not yet acknowledged."),
		redelivered: desc("redelivered_messages", "Messages delivered more than once and not yet acknowledged."),
		delivered:   desc("delivered_messages", "Consumer sequence: messages delivered so far (a counter)."),
		up:          desc("info_up", "1 when the consumer's state could be read at the last scrape."),
	})
}

func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.redelivered, c.delivered, c.up} {
		ch <- d
	}
}

func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cons, err := c.js.Consumer(ctx, c.stream, c.durable)
	var info *jetstream.ConsumerInfo
	if err == nil {
		info, err = cons.Info(ctx)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(info.NumPending))
	ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, float64(info.NumAckPending))
	ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, float64(info.NumRedelivered))
	ch <- prometheus.MustNewConstMetric(c.delivered, prometheus.CounterValue, float64(info.Delivered.Consumer))
}
