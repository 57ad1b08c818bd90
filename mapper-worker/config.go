package main

import (
	"github.com/devicehub/eventservice/mapper-worker/internal/mapping"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
)

// Config is mapper-worker's whole configuration.
type Config struct {
	MetricsAddr string
	Mapping     mapping.Config
	NATS        bus.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.MetricsAddr, "metrics-addr", "127.0.0.1:8081", "address of the operations listener: /metrics, /healthz, /readyz, /debug/pprof (empty: off); keep it off the public network")
	c.Mapping.Register(s)
	c.NATS.Register(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	if err := c.Mapping.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
