package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// The scale-out deployment on one machine: a 3-node NATS cluster with R3
// streams and registry bucket, two copies of every program. The node leading
// the events stream is stopped under load: ingestion goes on, and nothing
// answered stored is lost or stored twice.
func TestChaosScaleOutNATSNodeStopped(t *testing.T) {
	nodes := testenv.NATSCluster(t, 3)
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.ClientURL())
	}
	s := twoCopiesStack(t, urls, nil)

	js := testenv.OperatorJS(t, strings.Join(urls, ","))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := js.Stream(ctx, bus.DefaultNames.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	cl := info.CachedInfo().Cluster
	if cl == nil || len(cl.Replicas) != 2 || cl.Leader == "" {
		t.Fatalf("events stream is not R3: %+v", cl)
	}

	// Both copies of each worker have pull requests waiting.
	for _, c := range []struct{ stream, name string }{{bus.DefaultNames.EventsStream, bus.DefaultNames.MapperConsumer}, {bus.DefaultNames.MappedStream, bus.DefaultNames.WriterConsumer}} {
		seen := "no answer yet"
		testenv.WaitFor(t, "consumer "+c.name+": two copies pulling", testenv.WaitStall, func() string { return s.progress() + ", consumer: " + seen }, s.dead, func() bool {
			var ci *jetstream.ConsumerInfo
			ci, seen = consumerInfo(js, c.stream, c.name)
			return ci != nil && ci.NumWaiting >= 2
		})
	}
	total, at := chaosDuration()
	l := underLoad(t, s, total, at, func() {
		for _, n := range nodes {
			if n.Server().Name() == cl.Leader {
				t.Logf("stopping %s, leader of %s", cl.Leader, bus.DefaultNames.EventsStream)
				n.Stop()
			}
		}
	})
	reconcile(t, s, "nats-node-stopped", l)

	// Both copies of each worker did part of the work.
	for _, c := range []struct{ program, series string }{
		{"writer-worker", `writer_worker_rows_stored_total{table="input_values"}`},
		{"writer-worker.2", `writer_worker_rows_stored_total{table="input_values"}`},
		{"mapper-worker", `mapper_worker_events_total{outcome="stored"}`},
		{"mapper-worker.2", `mapper_worker_events_total{outcome="stored"}`},
		{"ingest-api", `ingest_api_requests_total{outcome="stored",status="200"}`},
		{"ingest-api.2", `ingest_api_requests_total{outcome="stored",status="200"}`},
	} {
		if v := s.scrape(t, c.program)[c.series]; v == 0 {
			t.Errorf("%s did none of the work (%s = 0)", c.program, c.series)
		} else {
			t.Logf("%s: %s = %v", c.program, c.series, v)
		}
	}
}
