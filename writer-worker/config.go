package main

import (
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/batch"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Config is writer-worker's whole configuration.
type Config struct {
	MetricsAddr string
	Batch       batch.Config
	NATS        bus.Config
	ClickHouse  chstore.Config
	Retention   retention.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.MetricsAddr, "metrics-addr", "127.0.0.1:8082", "address of the operations listener: /metrics, /healthz, /readyz, /debug/pprof (empty: off); keep it off the public network")
	c.Batch.Register(s)
	c.ClickHouse.Register(s)
	c.NATS.Register(s)
	c.Retention.Register(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	if err := c.Batch.Validate(); err != nil {
		return err
	}
	if err := c.ClickHouse.Validate(); err != nil {
		return err
	}
	if err := c.Retention.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
