package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// What an acknowledged publish to an R3 file stream costs on three NATS
// processes, with the server's default sync interval (flush every 2
// minutes, acknowledge at once) and with sync_interval always (each node
// fsyncs before it acknowledges): the setting the power loss test weighs
// (docs/guarantees.md). "one-at-a-time" is a publisher that waits for each
// ack (latency); "window-64" keeps 64 in flight, as ingest-api's batchers
// do (throughput). 1 KiB messages, about an events message of a few
// readings.
func BenchmarkR3Publish(b *testing.B) {
	for _, sync := range []string{"default", "always"} {
		b.Run("sync="+sync, func(b *testing.B) {
			interval := sync
			if sync == "default" {
				interval = ""
			}
			nodes := testenv.NATSProcesses(b, testenv.ProcCluster{Nodes: 3, SyncInterval: interval})
			js := testenv.OperatorJS(b, nodes[0].ClientURL()+","+nodes[1].ClientURL()+","+nodes[2].ClientURL())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "bench_sync", Subjects: []string{"bench.sync"},
				Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			b.Run("one-at-a-time", func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if _, err := js.Publish(context.Background(), "bench.sync", payload); err != nil {
						b.Fatalf("publish %d: %v", i, err)
					}
				}
			})
			b.Run("window-64", func(b *testing.B) {
				window := make(chan jetstream.PubAckFuture, 64)
				done := make(chan error)
				go func() {
					var err error
					for f := range window {
						select {
						case <-f.Ok():
						case e := <-f.Err():
							err = e
						}
					}
					done <- err
				}()
				for b.Loop() {
					f, err := js.PublishAsync("bench.sync", payload, jetstream.WithStallWait(10*time.Second))
					if err != nil {
						b.Fatal(err)
					}
					window <- f
				}
				close(window)
				if err := <-done; err != nil {
					b.Fatal(fmt.Errorf("ack: %w", err))
				}
			})
		})
	}
}
