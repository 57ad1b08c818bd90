package main

import (
	"errors"
	"time"

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
	s.Int(&c.Mapping.MaxAckPending, "max-ack-pending", 8192, "events held unacknowledged by this consumer")
	s.Int(&c.Mapping.PullBatch, "pull-batch", 500, "events pulled from JetStream per request")
	s.Int(&c.Mapping.EnvelopeMax, "envelope-max-events", 500, "most events in one message to writer-worker")
	s.Duration(&c.Mapping.AckWait, "ack-wait", 5*time.Second, "redelivery delay of an unacknowledged event (a crashed copy's events wait this long)")
	s.Duration(&c.Mapping.StaleWait, "registry-stale-wait", 2*time.Second, "how long an event waits for a registry change it was accepted under")
	s.String(&c.RegistryBucket, "registry-bucket", "device_registry", "JetStream KV bucket of the device registry")
	c.NATS.RegisterFlags(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.Mapping.MaxAckPending < 1 || c.Mapping.PullBatch < 1 || c.Mapping.EnvelopeMax < 1:
		return errors.New("MAX_ACK_PENDING, PULL_BATCH and ENVELOPE_MAX_EVENTS must be at least 1")
	case c.Mapping.AckWait < time.Second:
		return errors.New("ACK_WAIT must be at least 1s")
	case c.Mapping.StaleWait <= 0:
		return errors.New("REGISTRY_STALE_WAIT must be positive")
	case c.RegistryBucket == "":
		return errors.New("REGISTRY_BUCKET is empty")
	}
	return c.NATS.Validate()
}
