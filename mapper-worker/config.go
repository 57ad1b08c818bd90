package main

import (
	"errors"

	"github.com/devicehub/eventservice/mapper-worker/internal/mapping"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
)

// Config is mapper-worker's whole configuration.
type Config struct {
	HealthAddr     string
	Mapping        mapping.Config
	RegistryBucket string
	NATS           bus.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.HealthAddr, "health-addr", "127.0.0.1:8081", "address of /healthz and /readyz (empty: off)")
	c.Mapping.Register(s)
	s.String(&c.RegistryBucket, "registry-bucket", "device_registry", "JetStream KV bucket of the device registry")
	c.NATS.RegisterFlags(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.RegistryBucket == "":
		return errors.New("REGISTRY_BUCKET is empty")
	}
	if err := c.Mapping.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
