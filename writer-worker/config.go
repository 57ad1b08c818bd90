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
	s.Int(&c.Batch.MaxBatch, "batch-max-messages", 200, "most envelopes from mapper-worker (each up to its ENVELOPE_MAX_EVENTS) in one ClickHouse insert")
	s.Duration(&c.Batch.Linger, "batch-linger", 0, "how long a batch waits for more events once it has one (0: flush what is buffered)")
	s.Duration(&c.Batch.MinInterval, "batch-min-interval", 10*time.Millisecond, "the shortest pause between the starts of two value inserts under load")
	s.Duration(&c.Batch.PacePerEvent, "batch-pace-per-event", 500*time.Microsecond, "after a batch of n events the next insert starts n times this later: batches grow with load")
	s.Duration(&c.Batch.MaxInterval, "batch-max-interval", 25*time.Millisecond, "the longest pause between two value inserts")
	s.Int(&c.Batch.RawMaxRows, "raw-batch-max-rows", 20000, "most raw messages in one insert")
	s.Duration(&c.Batch.RawInterval, "raw-batch-interval", 500*time.Millisecond, "longest a raw message waits for its insert (the Messages view lags by this)")
	s.Duration(&c.Batch.InsertTimeout, "insert-timeout", 3*time.Second, "time allowed for one batch's inserts")
	s.Int(&c.Batch.MaxAckPending, "max-ack-pending", 2000, "envelopes held unacknowledged by this consumer")
	s.Int(&c.Batch.PullBatch, "pull-batch", 200, "envelopes pulled from JetStream per request")
	s.Duration(&c.Batch.AckWait, "ack-wait", 10*time.Second, "redelivery delay of an unacknowledged event (a crashed copy's events wait this long)")
	s.Duration(&c.Batch.KeyWindow, "idempotency-window", 24*time.Hour, "how long a retry with the same Idempotency-Key gets the first attempt's outcome instead of storing again")
	s.Duration(&c.Batch.RetryDelay, "keyed-retry-delay", time.Second, "wait before a keyed event whose values could not be stored is tried again")
	s.Int(&c.QueryWorkers, "query-workers", 4, "workspace read queries answered at once")
	s.Duration(&c.QueryTimeout, "query-timeout", 5*time.Second, "time allowed for one read query")
	s.String(&c.ClickHouse.Addr, "clickhouse-addr", "127.0.0.1:9000", "ClickHouse native protocol address")
	s.String(&c.ClickHouse.Database, "clickhouse-database", "device_events", "database holding the service's tables")
	s.String(&c.ClickHouse.User, "clickhouse-user", "default", "ClickHouse user")
	s.String(&c.ClickHouse.Password, "clickhouse-password", "", "ClickHouse password")
	s.Bool(&c.ClickHouse.TLS, "clickhouse-tls", false, "connect to ClickHouse over TLS")
	s.Duration(&c.ClickHouse.DialTimeout, "clickhouse-dial-timeout", 5*time.Second, "ClickHouse connect timeout")
	s.Duration(&c.ClickHouse.ReadTimeout, "clickhouse-read-timeout", 30*time.Second, "ClickHouse read timeout")
	s.Int(&c.ClickHouse.MaxConns, "clickhouse-max-conns", 8, "ClickHouse connections in the pool")
	c.NATS.RegisterFlags(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	switch {
	case c.Batch.MaxBatch < 1:
		return errors.New("BATCH_MAX_MESSAGES must be at least 1")
	case c.Batch.Linger < 0 || c.Batch.MinInterval < 0 || c.Batch.PacePerEvent < 0 || c.Batch.MaxInterval < 0:
		return errors.New("BATCH_LINGER, BATCH_MIN_INTERVAL, BATCH_PACE_PER_EVENT and BATCH_MAX_INTERVAL must not be negative")
	case c.Batch.RawMaxRows < 1 || c.Batch.RawInterval <= 0:
		return errors.New("RAW_BATCH_MAX_ROWS and RAW_BATCH_INTERVAL must be positive")
	case c.Batch.InsertTimeout <= 0 || c.QueryTimeout <= 0:
		return errors.New("INSERT_TIMEOUT and QUERY_TIMEOUT must be positive")
	case c.Batch.MaxAckPending < c.Batch.MaxBatch:
		return errors.New("MAX_ACK_PENDING must be at least BATCH_MAX_MESSAGES")
	case c.Batch.PullBatch < 1:
		return errors.New("PULL_BATCH must be at least 1")
	case c.Batch.AckWait <= c.Batch.InsertTimeout:
		return errors.New("ACK_WAIT must exceed INSERT_TIMEOUT")
	case c.Batch.KeyWindow <= 0 || c.Batch.RetryDelay <= 0:
		return errors.New("IDEMPOTENCY_WINDOW and KEYED_RETRY_DELAY must be positive")
	case c.QueryWorkers < 1:
		return errors.New("QUERY_WORKERS must be at least 1")
	}
	if err := c.ClickHouse.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
