// Command mapper-worker resolves which entity inputs the readings of each
// accepted event go to, and hands mapped events on to writer-worker.
package main

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/mapper-worker/internal/mapping"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/health"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/program"
	"github.com/devicehub/eventservice/pkg/registry"
)

func main() {
	var cfg Config
	program.Main("mapper-worker", &cfg, func(ctx context.Context, log *zap.Logger) error { return run(ctx, cfg, log) })
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	nc, js, err := bus.Open(ctx, cfg.NATS, "mapper-worker", log.With(zap.String("component", "nats")))
	if err != nil {
		return err
	}
	defer nc.Close()
	names := cfg.NATS.Names()
	cache := registry.NewCache()
	store, err := registry.Open(ctx, js, registry.BucketConfig{Bucket: names.RegistryBucket, Replicas: cfg.NATS.Replicas, ReadOnly: true},
		cache, log.With(zap.String("component", "registry")))
	if err != nil {
		return err
	}
	var worker *mapping.Worker
	hs := health.New(cfg.MetricsAddr, func(context.Context) error {
		switch {
		case !nc.IsConnected():
			return errors.New("nats disconnected")
		case !cache.IsSynced():
			return errors.New("registry not loaded")
		case !worker.Consuming():
			return errors.New("not consuming yet")
		}
		return nil
	})
	reg := metrics.NewRegistry(metrics.Mapper)
	metrics.WatchRegistry(reg, metrics.Mapper, cache)
	metrics.WatchConsumer(reg, metrics.Mapper, js, names.EventsStream, names.MapperConsumer)
	cfg.Mapping.Names = names
	hs.Mux.Handle("GET /metrics", metrics.Handler(reg))
	tally := diag.NewTally(diag.DefaultLimits, diag.Publisher(js, names.DiagSubject()), log.With(zap.String("component", "diagnostics")))
	tally.Register(reg, metrics.Mapper)
	worker = mapping.NewWorker(cfg.Mapping, nc, js, cache, tally, reg, log.With(zap.String("component", "mapper")))

	// The registry watch and health server outlive the consumer, so that
	// draining events still resolve against a live registry.
	return program.Run(ctx, log,
		program.Stage{
			{Name: "registry", Run: store.Run, Ready: cache.Synced()},
			{Name: "health", Run: hs.Run},
			{Name: "diagnostics", Run: tally.Run},
		},
		program.Stage{{Name: "mapper", Run: func(ctx context.Context) error {
			log.Info("mapper-worker consuming", zap.Int("devices", cache.Len()))
			return worker.Run(ctx)
		}}},
	)
}
