// Package program is the shared shape of the three mains: a probe mode for
// container health checks, flags and environment, validation, the logger
// (zap, sampled), and a context that ends on SIGINT or SIGTERM.
package program

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/version"
)

// Config is a program's configuration.
type Config interface {
	Register(s *envflag.Set)
	Validate() error
}

// Main runs a program and exits once, with status 1 and one line on failure.
func Main(name string, cfg Config, run func(context.Context, *zap.Logger) error) {
	if err := start(name, os.Args[1:], cfg, run); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

func start(name string, args []string, cfg Config, run func(context.Context, *zap.Logger) error) error {
	if len(args) == 2 && args[0] == "-probe" {
		return probe(args[1])
	}
	var level string
	var showVersion bool
	fs := envflag.New(name)
	fs.String(&level, "log-level", "info", "debug, info, warn or error (JSON lines; readable text when stderr is a terminal)")
	fs.FS.BoolVar(&showVersion, "version", false, "print the version and exit")
	cfg.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if showVersion {
		fmt.Println(name, version.Version, version.Revision())
		return nil
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := newLogger(level, !isTerminal(os.Stderr))
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("starting", zap.String("program", name), zap.String("version", version.Version), zap.String("revision", version.Revision()))
	if limit := setMemoryLimit(); limit > 0 && limit < 1<<62 {
		log.Info("memory limit", zap.Int64("bytes", limit))
	}
	return run(ctx, log.With(zap.String("program", name)))
}

// newLogger returns a logger at level ("debug", "info", "warn", "error")
// that writes JSON lines, or readable text for a person at a terminal.
func newLogger(level string, json bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	cfg := zap.NewProductionConfig()
	if !json {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	// Lines with the same message and level are sampled per second: the
	// first sampleFirst are written, then one in sampleThereafter. A flood
	// of rejections costs bounded log bytes (docs/operations.md).
	cfg.Sampling = &zap.SamplingConfig{Initial: sampleFirst, Thereafter: sampleThereafter}
	return cfg.Build()
}

const (
	sampleFirst      = 20
	sampleThereafter = 1000
)

// probe is `PROGRAM -probe URL`, the container health check on images that
// have no shell or curl: nil when URL answered 200.
func probe(url string) error {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: %s answered %d", url, resp.StatusCode)
	}
	return nil
}

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
