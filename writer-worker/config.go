package main

import (
	"errors"
	"time"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/writer-worker/internal/batch"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Config is writer-worker's whole configuration.
type Config struct {
	HealthAddr   string
	Batch        batch.Config
	QueryWorkers int
	QueryTimeout time.Duration
	NATS         bus.Config
	ClickHouse   chstore.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.HealthAddr, "health-addr", "127.0.0.1:8082", "address of /healthz and /readyz (empty: off)")
	c.Batch.Register(s)
	s.Int(&c.QueryWorkers, "query-workers", 4, "workspace read queries answered at once")
	s.Duration(&c.QueryTimeout, "query-timeout", 5*time.Second, "time allowed for one read query")
	c.ClickHouse.Register(s)
	c.NATS.RegisterFlags(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.QueryTimeout <= 0:
		return errors.New("QUERY_TIMEOUT must be positive")
	case c.QueryWorkers < 1:
		return errors.New("QUERY_WORKERS must be at least 1")
	}
	if err := c.Batch.Validate(); err != nil {
		return err
	}
	if err := c.ClickHouse.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
