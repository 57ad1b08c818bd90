package batch

import (
	"errors"
	"time"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/settle"
)

// Config tunes batching and the consumer.
type Config struct {
	// MaxBatch is the most envelopes (of up to the mapper's
	// ENVELOPE_MAX_EVENTS events each) one flush takes.
	MaxBatch int
	// Linger is how long a flush may wait for more events once it has
	// some; zero flushes whatever is buffered at once. The insert itself
	// takes time, during which the next batch gathers, so batches grow
	// with load even without lingering.
	Linger time.Duration
	// MinInterval, PacePerEvent and MaxInterval space the starts of value
	// inserts: after a batch of n events the next insert starts no sooner
	// than max(MinInterval, min(n*PacePerEvent, MaxInterval)) after it; an
	// idle writer inserts at once. ClickHouse's cost is per insert (about 5 ms of
	// server CPU for this table with its merges at 200 inserts/s, measured
	// with bench/chcost) far more than per row, so the floor bounds inserts
	// per second and the pace lets batches grow further with load.
	MinInterval  time.Duration
	PacePerEvent time.Duration
	MaxInterval  time.Duration
	// RawMaxRows and RawInterval bound the raw message log's batches.
	RawMaxRows    int
	RawInterval   time.Duration
	InsertTimeout time.Duration
	Consumer      bus.ConsumerConfig
	// KeyWindow is how long the outcome of a keyed event (one sent with an
	// Idempotency-Key) answers its retries.
	KeyWindow time.Duration
	// Limits bound redelivery (see pkg/settle).
	Limits settle.Limits
	// Names are the streams and subjects (set from the NATS configuration).
	Names bus.Names
}

// Register adds the writer's settings.
func (c *Config) Register(s *envflag.Set) {
	s.Int(&c.MaxBatch, "batch-max-messages", 200, "most envelopes from mapper-worker (each up to its ENVELOPE_MAX_EVENTS) in one ClickHouse insert")
	s.Duration(&c.Linger, "batch-linger", 0, "how long a batch waits for more events once it has one (0: flush what is buffered)")
	s.Duration(&c.MinInterval, "batch-min-interval", 10*time.Millisecond, "the shortest pause between the starts of two value inserts under load")
	s.Duration(&c.PacePerEvent, "batch-pace-per-event", 500*time.Microsecond, "after a batch of n events the next insert starts n times this later: batches grow with load")
	s.Duration(&c.MaxInterval, "batch-max-interval", 25*time.Millisecond, "the longest pause between two value inserts")
	s.Int(&c.RawMaxRows, "raw-batch-max-rows", 20000, "most raw messages in one insert")
	s.Duration(&c.RawInterval, "raw-batch-interval", 500*time.Millisecond, "longest a raw message waits for its insert (the Messages view lags by this)")
	s.Duration(&c.InsertTimeout, "insert-timeout", 3*time.Second, "time allowed for one batch's inserts")
	c.Consumer.Register(s, bus.ConsumerConfig{MaxAckPending: 2000, PullBatch: 200, AckWait: 10 * time.Second}, "envelopes")
	s.Duration(&c.KeyWindow, "idempotency-window", 24*time.Hour, "how long a retry with the same Idempotency-Key gets the first attempt's outcome instead of storing again")
	c.Limits.Register(s, settle.Limits{MaxDeliver: 200, RetryDelay: time.Second, RetryMaxDelay: 30 * time.Second})
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.MaxBatch < 1:
		return errors.New("BATCH_MAX_MESSAGES must be at least 1")
	case c.Linger < 0 || c.MinInterval < 0 || c.PacePerEvent < 0 || c.MaxInterval < 0:
		return errors.New("BATCH_LINGER, BATCH_MIN_INTERVAL, BATCH_PACE_PER_EVENT and BATCH_MAX_INTERVAL must not be negative")
	case c.RawMaxRows < 1 || c.RawInterval <= 0:
		return errors.New("RAW_BATCH_MAX_ROWS and RAW_BATCH_INTERVAL must be positive")
	case c.InsertTimeout <= 0:
		return errors.New("INSERT_TIMEOUT must be positive")
	case c.Consumer.MaxAckPending < c.MaxBatch:
		return errors.New("MAX_ACK_PENDING must be at least BATCH_MAX_MESSAGES")
	case c.Consumer.AckWait <= c.InsertTimeout:
		return errors.New("ACK_WAIT must exceed INSERT_TIMEOUT")
	case c.KeyWindow <= 0:
		return errors.New("IDEMPOTENCY_WINDOW must be positive")
	}
	if err := c.Consumer.Validate(); err != nil {
		return err
	}
	return c.Limits.Validate()
}
