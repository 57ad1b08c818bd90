// Command ingest-api is the HTTP front end of the device event service: it
// validates and authenticates device events, publishes them to JetStream and
// answers with the outcome the workers report.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/api"
	"github.com/devicehub/eventservice/ingest-api/internal/audit"
	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/ingest-api/internal/redact"
	"github.com/devicehub/eventservice/ingest-api/internal/submit"
	"github.com/devicehub/eventservice/ingest-api/internal/workspace"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/health"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/program"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/reply"
	"github.com/devicehub/eventservice/pkg/retention"
)

func main() {
	var cfg Config
	program.Main("ingest-api", &cfg, func(ctx context.Context, log *zap.Logger) error { return run(ctx, cfg, log) })
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	cfg = cfg.withDevDefaults()
	names := cfg.NATS.Names()
	keys, err := registry.NewKeyring(cfg.TokenKeys())
	if err != nil {
		return err
	}
	nc, js, err := bus.Open(ctx, cfg.NATS, "ingest-api", log.With(zap.String("component", "nats")))
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := registry.Open(ctx, js, registry.BucketConfig{Bucket: names.RegistryBucket, Replicas: cfg.NATS.Replicas},
		registry.NewCache(), log.With(zap.String("component", "registry")))
	if err != nil {
		return err
	}
	census, err := registry.OpenCensus(ctx, js, names.CensusBucket, cfg.NATS.Replicas, keys, log.With(zap.String("component", "census")))
	if err != nil {
		return err
	}
	adminKeys, err := adminkeys.Open(ctx, js, names.KeysBucket, cfg.NATS.Replicas, cfg.AdminToken, log.With(zap.String("component", "adminkeys")))
	if err != nil {
		return err
	}
	trail, err := audit.Open(ctx, js, names, cfg.NATS.Replicas, cfg.Retention.Periods[retention.Audit], log.With(zap.String("component", "audit")))
	if err != nil {
		return err
	}
	waiter, err := reply.NewWaiter(nc, names.ReplyPrefix(), log.With(zap.String("component", "reply")))
	if err != nil {
		return err
	}
	defer waiter.Close()

	claims, err := claim.Open(ctx, js, names, log.With(zap.String("component", "claims")))
	if err != nil {
		return err
	}

	reg := metrics.NewRegistry(metrics.Ingest)
	metrics.WatchRegistry(reg, metrics.Ingest, store.Cache())

	reads := query.NewClient(nc, names.QueryPrefix(), queryTimeout)
	// A message's events travel on in one envelope beside their mapped
	// values: they may fill half a NATS message.
	sub := submit.New(submit.Config{Subject: names.EventsSubject(), MaxBytes: int(nc.MaxPayload() / 2), OutcomeTimeout: cfg.OutcomeTimeout, ClaimFirst: cfg.ClaimFirst},
		js, claims, waiter, reads.Outcomes, reg, log.With(zap.String("component", "submit")))
	proxies, err := cfg.Guard.Proxies()
	if err != nil {
		return err
	}
	failures, budget := guard.NewFailures(cfg.Guard.AuthFailures, guard.AuthWindow), guard.NewBudget(cfg.Guard.BodyMemory)
	limiter := ratelimit.New(cfg.DeviceRate, cfg.DeviceBurst)
	backfills, err := backfill.Open(ctx, js, names.BackfillBucket, cfg.NATS.Replicas, log.With(zap.String("component", "nats")))
	if err != nil {
		return err
	}
	tally := diag.NewTally(diag.DefaultLimits, diag.Publisher(js, names.DiagSubject()), log.With(zap.String("component", "diagnostics")))
	tally.Register(reg, metrics.Ingest)
	answers := edge.NewAnswers(log.With(zap.String("component", "http")), reg)
	e, srv := api.New(api.Deps{
		Metrics: reg, Answers: answers,
		Log: log.With(zap.String("component", "http")), Registry: store, Submitter: sub, Replies: waiter.Subject(), Query: reads,
		Limiter:  limiter,
		Failures: failures,
		Budget:   budget,
		Work:     guard.NewWork(),
		Proxies:  proxies,
		Redactor: redact.New(cfg.RedactKeys),
		Keys:     keys,
		Tally:    counted(tally),
		Limits: api.Limits{MaxBodyBytes: cfg.MaxBodyBytes, DiscardBytes: discardFactor * cfg.MaxBodyBytes, MaxInFlight: cfg.MaxInFlight,
			ReadingTime: cfg.ReadingTime, MaxBatchMessages: cfg.MaxBatchMessages,
			BodyMinRate: cfg.Guard.BodyMinRate, BodyTimeout: readTimeout},
	})
	ws := workspace.New(workspace.Deps{
		Log: log.With(zap.String("component", "workspace")), Answers: answers, Metrics: reg,
		Registry: store, Keys: keys, AdminKeys: adminKeys, Audit: trail, Backfills: backfills,
		Query: reads, JS: js, Names: names, Limiter: limiter, Failures: failures, Proxies: proxies,
	})
	// The operations listener's /readyz checks what the API's does.
	ops := health.New(cfg.MetricsAddr, srv.Ready)
	ops.Mux.Handle("GET /metrics", metrics.Handler(reg))
	hs := httpServer(e, cfg.OutcomeTimeout+writeSlack)
	wss := httpServer(ws, queryTimeout+writeSlack)

	// The workspace listener is open before the device port answers
	// ready: a client told "ready" finds both.
	wln, err := net.Listen("tcp", cfg.WorkspaceAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer wln.Close()

	// The publisher, registry and operations listener outlive the HTTP
	// server: the requests it still answers while draining need them.
	return program.Run(ctx, log,
		program.Stage{
			{Name: "registry", Run: store.Run, Ready: store.Cache().Synced()},
			{Name: "token key census", Run: census.Run, Ready: census.Ready()},
			{Name: "admin keys", Run: adminKeys.Run, Ready: adminKeys.Synced()},
			{Name: "claims log", Run: claims.Run, Ready: claims.Ready()},
			{Name: "submitter", Run: sub.Run},
			{Name: "ops", Run: ops.Run},
			{Name: "readiness", Run: srv.WatchReady},
			{Name: "diagnostics", Run: tally.Run},
			{Name: "rate sharing", Run: limiter.Sharing(nc, names.RateSubject(), waiter.Subject(), log.With(zap.String("component", "ratelimit")))},
		},
		program.Stage{{Name: "registry upgrade", Run: store.KeepUpgraded(keys, census)}, {Name: "http", Run: func(ctx context.Context) error {
			ln, err := net.Listen("tcp", cfg.HTTPAddr)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			conns := guard.Listen(ln, cfg.Guard.MaxConnsPerSource, cfg.Guard.MaxConns, proxies, cfg.TLSCert != "")
			guard.RegisterMetrics(reg, conns, failures, budget)
			log.Info("ingest-api listening", zap.String("addr", ln.Addr().String()), zap.Int("devices", store.Cache().Len()))
			return serve(ctx, cfg, hs, conns, srv.Drain, log)
		}}, {Name: "workspace", Run: func(ctx context.Context) error {
			log.Info("workspace listening", zap.String("addr", wln.Addr().String()))
			return serve(ctx, cfg, wss, wln, func() {}, log)
		}}},
	)
}

// httpServer is the http.Server of one listener: bounded headers and
// timeouts, each connection's context marked for guard.Conns.
func httpServer(h http.Handler, writeTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       guard.ConnContext,
	}
}

// serve answers HTTP on ln (HTTPS with HTTP_TLS_CERT) until ctx ends, then
// shuts down in order: drain (not ready), stop accepting, answer what is in
// flight.
func serve(ctx context.Context, cfg Config, hs *http.Server, ln net.Listener, drain func(), log *zap.Logger) error {
	serveErr := make(chan error, 1)
	go func() {
		if cfg.TLSCert != "" {
			serveErr <- hs.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			serveErr <- hs.Serve(ln)
		}
	}()
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	}
	drain()
	log.Info("shutting down", zap.String("addr", ln.Addr().String()))
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-serveErr // the serving goroutine has returned
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
