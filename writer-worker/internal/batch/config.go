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
	// MaxBatch is the most envelopes one flush takes.
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
	// with chstore's BenchmarkInsertCost) far more than per row, so the floor bounds inserts
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

// Register adds the writer's settings (INSERT_TIMEOUT, ACK_WAIT,
// IDEMPOTENCY_WINDOW, MAX_DELIVER, RETRY_MAX_DELAY); the batching is the
// defaults below, measured on 2 cores (docs/performance.md).
func (c *Config) Register(s *envflag.Set) {
	c.MaxBatch, c.Linger = 200, 0
	c.MinInterval, c.PacePerEvent, c.MaxInterval = 10*time.Millisecond, 500*time.Microsecond, 25*time.Millisecond
	c.RawMaxRows, c.RawInterval = 20000, 500*time.Millisecond
	s.Duration(&c.InsertTimeout, "insert-timeout", 3*time.Second, "time allowed for one batch's inserts")
	c.Consumer.RegisterAckWait(s, bus.ConsumerConfig{MaxAckPending: 2000, PullBatch: 200, AckWait: 10 * time.Second})
	s.Duration(&c.KeyWindow, "idempotency-window", 24*time.Hour, "how long a retry with the same Idempotency-Key gets the first attempt's outcome instead of storing again")
	c.Limits.Register(s, settle.Limits{MaxDeliver: 200, RetryDelay: time.Second, RetryMaxDelay: 30 * time.Second, NotReadyDelay: time.Second})
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.InsertTimeout <= 0:
		return errors.New("INSERT_TIMEOUT must be positive")
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
