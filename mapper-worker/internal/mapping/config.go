package mapping

import (
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

// Register adds the mapper's settings (ACK_WAIT, MAX_DELIVER,
// RETRY_MAX_DELAY); the rest are the defaults below, measured on 2 cores
// (docs/performance.md).
func (c *Config) Register(s *envflag.Set) {
	c.Consumer.RegisterAckWait(s, bus.ConsumerConfig{MaxAckPending: 8192, PullBatch: 500, AckWait: 5 * time.Second})
	c.EnvelopeMax = 500
	c.StaleWait = 2 * time.Second
	c.Limits.Register(s, settle.Limits{MaxDeliver: 200, RetryDelay: 250 * time.Millisecond, RetryMaxDelay: 30 * time.Second})
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	if err := c.Consumer.Validate(); err != nil {
		return err
	}
	return c.Limits.Validate()
}
