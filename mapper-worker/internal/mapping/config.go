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
	MaxAckPending int
	PullBatch     int
	AckWait       time.Duration
	// EnvelopeMax is the most events one envelope carries.
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
	s.Int(&c.MaxAckPending, "max-ack-pending", 8192, "events messages held unacknowledged by this consumer")
	s.Int(&c.PullBatch, "pull-batch", 500, "messages pulled from JetStream per request")
	s.Int(&c.EnvelopeMax, "envelope-max-events", 500, "most events in one message to writer-worker")
	s.Duration(&c.AckWait, "ack-wait", 5*time.Second, "redelivery delay of an unacknowledged message (a crashed copy's messages wait this long)")
	s.Duration(&c.StaleWait, "registry-stale-wait", 2*time.Second, "how long an event waits for a registry change it was accepted under")
	c.Limits.Register(s, settle.Limits{MaxDeliver: 200, RetryDelay: 250 * time.Millisecond, RetryMaxDelay: 30 * time.Second})
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.MaxAckPending < 1 || c.PullBatch < 1 || c.EnvelopeMax < 1:
		return errors.New("MAX_ACK_PENDING, PULL_BATCH and ENVELOPE_MAX_EVENTS must be at least 1")
	case c.AckWait < time.Second:
		return errors.New("ACK_WAIT must be at least 1s")
	case c.StaleWait <= 0:
		return errors.New("REGISTRY_STALE_WAIT must be positive")
	}
	return c.Limits.Validate()
}
