package mapping

import (
	"errors"
	"time"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/settle"
)

// Config tunes the mapper's consumer.
type Config struct {
	Consumer bus.ConsumerConfig
	// EnvelopeMax is the most events messages mapped in one round; each
	// becomes its own envelope.
	EnvelopeMax int
	// StaleWait is how long an event waits for this process's registry copy
	// to reach the revision the event was accepted under.
	StaleWait time.Duration
	// Limits bound redelivery (see pkg/settle).
	Limits settle.Limits
	// Names are the streams and subjects (set from the NATS configuration).
	Names bus.Names
}

// Register adds the mapper's settings.
func (c *Config) Register(s *envflag.Set) {
	c.Consumer.Register(s, bus.ConsumerConfig{MaxAckPending: 8192, PullBatch: 500, AckWait: 5 * time.Second}, "events messages")
	s.Int(&c.EnvelopeMax, "envelope-max-events", 500, "most events messages mapped in one round (each becomes its own envelope to writer-worker, so that a redelivered one is dropped by the stream as a duplicate)")
	s.Duration(&c.StaleWait, "registry-stale-wait", 2*time.Second, "how long an event waits for a registry change it was accepted under")
	c.Limits.Register(s, settle.Limits{MaxDeliver: 200, RetryDelay: 250 * time.Millisecond, RetryMaxDelay: 30 * time.Second})
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.EnvelopeMax < 1:
		return errors.New("ENVELOPE_MAX_EVENTS must be at least 1")
	case c.StaleWait <= 0:
		return errors.New("REGISTRY_STALE_WAIT must be positive")
	}
	if err := c.Consumer.Validate(); err != nil {
		return err
	}
	return c.Limits.Validate()
}
