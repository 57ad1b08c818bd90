// Command writer-worker batch-writes mapped device events to ClickHouse,
// reports each outcome to the waiting request, and answers workspace reads.
package main

import (
	"context"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/health"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/program"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/pkg/retry"
	"github.com/devicehub/eventservice/writer-worker/internal/backfiller"
	"github.com/devicehub/eventservice/writer-worker/internal/batch"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/diagsink"
	"github.com/devicehub/eventservice/writer-worker/internal/idem"
	"github.com/devicehub/eventservice/writer-worker/internal/janitor"
	"github.com/devicehub/eventservice/writer-worker/internal/reads"
	"github.com/devicehub/eventservice/writer-worker/internal/rollup"
)

func main() {
	if subcommand(os.Args[1:]) {
		return
	}
	var cfg Config
	program.Main("writer-worker", &cfg, func(ctx context.Context, log *zap.Logger) error { return run(ctx, cfg, log) })
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	store, err := chstore.Open(cfg.ClickHouse)
	if err != nil {
		return err
	}
	defer store.Close()
	// ClickHouse may start after us: retry the schema until it answers.
	err = retry.Backoff{Initial: time.Second, Max: 10 * time.Second}.Do(ctx, store.Migrate, func(_ int, err error, _ time.Duration) {
		log.Warn("clickhouse not ready, retrying", zap.Error(err))
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	nc, js, err := bus.Open(ctx, cfg.NATS, "writer-worker", log.With(zap.String("component", "nats")))
	if err != nil {
		return err
	}
	defer nc.Close()
	names := cfg.NATS.Names()

	var writer *batch.Writer
	hs := health.New(cfg.MetricsAddr, func(ctx context.Context) error {
		switch {
		case !nc.IsConnected():
			return errors.New("nats disconnected")
		case !writer.Consuming():
			return errors.New("not consuming yet")
		}
		return health.Unready("storage unreachable", store.Ping(ctx))
	})
	reg := metrics.NewRegistry(metrics.Writer)
	metrics.WatchConsumer(reg, metrics.Writer, js, names.MappedStream, names.WriterConsumer)
	cfg.Batch.Names = names
	hs.Mux.Handle("GET /metrics", metrics.Handler(reg))
	seen := idem.NewSeen(store, cfg.Batch.KeyWindow, idem.FilterBytes, log.With(zap.String("component", "keys")))
	keys := idem.New(store, seen, cfg.Batch.KeyWindow, log.With(zap.String("component", "keys")))
	claims, err := claimlog.Open(ctx, js, names, "", seen, log.With(zap.String("component", "claims")))
	if err != nil {
		return err
	}
	writer = batch.New(cfg.Batch, nc, js, store, keys, claims, reg, log.With(zap.String("component", "writer")))
	sink := diagsink.New(js, names, cfg.Batch.Limits, store, metrics.Writer, reg, log.With(zap.String("component", "diagnostics")))
	jobs, err := backfill.Open(ctx, js, names.BackfillBucket, cfg.NATS.Replicas, log.With(zap.String("component", "nats")))
	if err != nil {
		return err
	}
	backfills := backfiller.New(jobs, store, writer.Events, reg, log.With(zap.String("component", "backfill")))
	rollups := rollup.New(jobs, store, cfg.Retention.Periods[retention.Readings], rollup.DefaultBudget, reg, log.With(zap.String("component", "rollup")))
	sweeps := janitor.New(store, cfg.Retention.Periods, cfg.Batch.KeyWindow, reg, log.With(zap.String("component", "retention")))
	queries := reads.New(nc, names.QueryPrefix(), store, keys.Lookup, log.With(zap.String("component", "reads")))

	// The writer drains first; reads and health stop after it, so that
	// the storage path stays visible while the last batch flushes.
	addrs, db := store.Where()
	log.Info("writer-worker consuming", zap.Strings("clickhouse", addrs), zap.String("database", db))
	return program.Run(ctx, log,
		program.Stage{
			{Name: "reads", Run: queries.Run},
			{Name: "keys seen", Run: seen.Run},
			{Name: "claims log", Run: claims.Run},
			{Name: "retention", Run: sweeps.Run},
			{Name: "rollup", Run: rollups.Run},
			{Name: "health", Run: hs.Run},
		},
		program.Stage{{Name: "writer", Run: writer.Run}, {Name: "diagnostics", Run: sink.Run}, {Name: "backfills", Run: backfills.Run}},
	)
}
