// Package logging builds the zap logger every program uses.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level ("debug", "info", "warn", "error") that
// writes JSON lines, or readable text for a person at a terminal.
func New(level string, json bool) (*zap.Logger, error) {
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
