// Package logging builds the zap logger every program uses.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level ("debug", "info", "warn", "error") with
// format "json" (production) or "console" (development).
func New(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
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
