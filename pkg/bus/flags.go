package bus

import (
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// RegisterFlags adds the NATS settings every program shares.
func (c *Config) RegisterFlags(s *envflag.Set) {
	s.String(&c.URL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	s.String(&c.CredsFile, "nats-creds", "", "NATS credentials file (JWT + nkey)")
	s.String(&c.User, "nats-user", "", "NATS user of this program (deploy/nats/auth.conf has one per program)")
	s.String(&c.Password, "nats-password", "", "password of NATS_USER (from a secret; never logged)")
	s.String(&c.TLSCAFile, "nats-tls-ca", "", "CA file to verify the NATS server")
	s.String(&c.TLSCert, "nats-tls-cert", "", "client certificate for NATS mutual TLS")
	s.String(&c.TLSKey, "nats-tls-key", "", "client key for NATS mutual TLS")
	s.Int(&c.Replicas, "nats-replicas", 1, "replicas of streams and the registry bucket (3 in a cluster)")
	s.Duration(&c.StreamMaxAge, "nats-stream-max-age", 24*time.Hour, "oldest event a stream keeps while a stage is down")
	s.Duration(&c.DedupeWindow, "nats-dedupe-window", 2*time.Minute, "how long the events stream drops a second publish of one event id (a retry with the same Idempotency-Key while the first is in flight)")
	s.String(&c.Names.EventsStream, "nats-events-stream", DefaultNames.EventsStream, "stream of accepted events")
	s.String(&c.Names.MappedStream, "nats-mapped-stream", DefaultNames.MappedStream, "stream of mapped events")
	s.String(&c.Names.MapperConsumer, "nats-mapper-consumer", DefaultNames.MapperConsumer, "durable consumer every mapper-worker copy shares")
	s.String(&c.Names.WriterConsumer, "nats-writer-consumer", DefaultNames.WriterConsumer, "durable consumer every writer-worker copy shares")
	s.String(&c.Names.SubjectPrefix, "nats-subject-prefix", DefaultNames.SubjectPrefix, "first tokens of every subject the programs use")
	s.String(&c.Names.DeadLetterStream, "nats-deadletter-stream", DefaultNames.DeadLetterStream, "stream of dead letters: messages the workers gave up on")
	s.String(&c.Names.ClaimsStream, "nats-claims-stream", DefaultNames.ClaimsStream, "stream of claims on keyed events in the pipeline (a retry with the same Idempotency-Key waits for the first)")
	s.Duration(&c.DeadLetterMaxAge, "nats-deadletter-max-age", 14*24*time.Hour, "oldest dead letter kept")
	s.Int64(&c.DeadLetterMaxBytes, "nats-deadletter-max-bytes", 1<<30, "bytes of dead letters kept (the oldest go first)")
	s.Int64(&c.StreamMaxBytes, "nats-stream-max-bytes", 1<<30, "bytes a stream may hold before publishes are refused")
}
