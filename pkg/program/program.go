// Package program is the shared shape of the three mains: a probe mode for
// container health checks, flags and environment, validation, the logger,
// and a context that ends on SIGINT or SIGTERM.
package program

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/health"
	"github.com/devicehub/eventservice/pkg/logging"
)

// Config is a program's configuration.
type Config interface {
	Register(s *envflag.Set)
	Validate() error
}

// LogConfig holds the logging settings every program has; Main registers them.
type LogConfig struct{ Level, Format string }

// Main runs a program and exits once, with status 1 and one line on failure.
func Main(name string, cfg Config, run func(context.Context, *zap.Logger) error) {
	if err := start(name, os.Args[1:], cfg, run); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func start(name string, args []string, cfg Config, run func(context.Context, *zap.Logger) error) error {
	if probe, err := health.ProbeArgs(args); probe {
		return err
	}
	var lc LogConfig
	var pprofAddr string
	fs := envflag.New(name)
	fs.String(&lc.Level, "log-level", "info", "debug, info, warn or error")
	fs.String(&lc.Format, "log-format", "json", "json or console")
	fs.String(&pprofAddr, "pprof-addr", "", "serve net/http/pprof here (empty: off); keep it on loopback")
	cfg.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := logging.New(lc.Level, lc.Format)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if pprofAddr != "" {
		stopProf, err := servePprof(pprofAddr)
		if err != nil {
			return err
		}
		defer stopProf()
	}
	if limit := setMemoryLimit(); limit > 0 && limit < 1<<62 {
		log.Info("memory limit", zap.Int64("bytes", limit))
	}
	return run(ctx, log.With(zap.String("program", name)))
}
