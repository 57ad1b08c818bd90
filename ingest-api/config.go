package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/api"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/registry"
)

// devAdminToken is the token `make run` uses when ADMIN_TOKEN is unset. The
// program refuses it unless -dev is given.
const devAdminToken = "dev-admin-token"

// devTokenKey is the TOKEN_KEY of -dev when none is given: a development
// registry's tokens are not protected by it.
const devTokenKey = "dev-token-key-not-secret-0123456789abcdef"

// Config is ingest-api's whole configuration.
type Config struct {
	HTTPAddr          string
	MetricsAddr       string
	TLSCert, TLSKey   string
	AdminToken        string
	TokenKey          string
	TokenKeyPrevious  string
	Dev               bool
	MaxBodyBytes      int64
	DiscardBodyBytes  int64
	MaxInFlight       int
	DeviceRate        float64
	DeviceBurst       int
	PublishMaxEvents  int
	PublishMaxPending int
	PublishLinger     time.Duration
	OutcomeTimeout    time.Duration
	QueryTimeout      time.Duration
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	RegistryBucket    string
	ReadingTime       readtime.Bounds
	MaxBatchMessages  int
	RedactKeys        string
	AuditMaxAge       time.Duration
	NATS              bus.Config
	Guard             guard.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address")
	s.String(&c.MetricsAddr, "metrics-addr", "127.0.0.1:8083", "address of the operations listener: /metrics, /healthz, /readyz (empty: off); keep it off the public network")
	s.String(&c.TLSCert, "http-tls-cert", "", "certificate file: serve HTTPS when set")
	s.String(&c.TLSKey, "http-tls-key", "", "key file for -http-tls-cert")
	s.String(&c.AdminToken, "admin-token", "", "bearer token of the workspace API")
	s.String(&c.TokenKey, "token-key", "", "secret of at least 32 bytes (64 hex digits from a random source) under which device tokens are kept as keyed digests and sealed copies; only ingest-api holds it")
	s.String(&c.TokenKeyPrevious, "token-key-previous", "", "the TOKEN_KEY being replaced: records made under it are rewritten under TOKEN_KEY at start (docs/operations.md)")
	s.Bool(&c.Dev, "dev", false, "development mode: allow the built-in admin token and token key")
	s.Int64(&c.MaxBodyBytes, "max-body-bytes", 1<<20, "largest request body accepted (413 beyond)")
	s.Int64(&c.DiscardBodyBytes, "discard-body-bytes", 16<<20, "how much of a refused body is read and dropped so that clients that write before they read get the 413 (beyond it the connection is closed)")
	s.Int(&c.MaxInFlight, "max-in-flight", 512, "authenticated requests in the pipeline at once (bodies being read do not count: MAX_BODY_MEMORY bounds them); 503 + Retry-After beyond")
	s.Float64(&c.DeviceRate, "device-rate", 100, "readings per second one device may post, a backlog counting each of its messages (0: no limit); 429 beyond")
	s.Int(&c.DeviceBurst, "device-burst", 1000, "readings one device may post at once above its rate (a larger backlog takes the whole burst)")
	s.Int(&c.PublishMaxEvents, "publish-max-events", 256, "most single readings of concurrent requests gathered into one JetStream message, keyed and unkeyed apart (1: a message per reading)")
	s.Int(&c.PublishMaxPending, "publish-max-pending", 2, "messages awaiting the stream's ack at once; meanwhile new events gather into the next message")
	s.Duration(&c.PublishLinger, "publish-linger", 2*time.Millisecond, "how long a message waits for more events once it has one: concurrent requests share messages at moderate rates (0: publish at once when a slot is free)")
	s.Duration(&c.OutcomeTimeout, "outcome-timeout", 5*time.Second, "how long a request waits for the storage outcome")
	s.Duration(&c.QueryTimeout, "query-timeout", 5*time.Second, "how long a workspace read waits for writer-worker")
	s.Duration(&c.ReadHeaderTimeout, "http-read-header-timeout", 5*time.Second, "time allowed to read request headers")
	s.Duration(&c.ReadTimeout, "http-read-timeout", 15*time.Second, "time allowed to read a whole request")
	s.Duration(&c.WriteTimeout, "http-write-timeout", 30*time.Second, "time allowed to write a response")
	s.Duration(&c.IdleTimeout, "http-idle-timeout", 120*time.Second, "keep-alive idle time")
	s.Duration(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "time allowed to answer in-flight requests at shutdown")
	s.String(&c.RegistryBucket, "registry-bucket", "device_registry", "JetStream KV bucket of the device registry")
	s.Int(&c.MaxBatchMessages, "max-batch-messages", 1000, "most messages in one backlog request (POST /api/v1/deviceapi/events); 413 beyond")
	s.Duration(&c.ReadingTime.MaxAge, "max-reading-age", 90*24*time.Hour, "oldest reading time accepted (ts or the timestamp input); an older one is stored at its receive time, with a note")
	s.Duration(&c.ReadingTime.MaxFuture, "max-reading-future", 5*time.Minute, "how far ahead of the receive time a reading time may be (device clocks drift)")
	s.String(&c.RedactKeys, "redact-keys", "accessToken,access_token,password,secret", "comma-separated member names whose values are replaced by \"[redacted]\" at any depth of a message before it is kept (the request's own tokens are removed wherever they appear, whatever this says)")
	s.Duration(&c.AuditMaxAge, "audit-max-age", 400*24*time.Hour, "how long the audit trail keeps a record of a workspace change (JetStream drops older ones)")
	c.NATS.RegisterFlags(s)
	c.Guard.Register(s)
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	if c.AdminToken == "" && c.Dev {
		c.AdminToken = devAdminToken
	}
	if c.TokenKey == "" && c.Dev {
		c.TokenKey = devTokenKey
	}
	switch {
	case c.MaxBatchMessages < 1:
		return errors.New("MAX_BATCH_MESSAGES must be at least 1")
	case c.ReadingTime.MaxAge <= 0 || c.ReadingTime.MaxFuture < 0:
		return errors.New("MAX_READING_AGE must be positive and MAX_READING_FUTURE not negative")
	case c.HTTPAddr == "":
		return errors.New("HTTP_ADDR is empty")
	case c.AdminToken == "":
		return errors.New("ADMIN_TOKEN is empty: set it, or pass -dev for the development default")
	case c.AdminToken == devAdminToken && !c.Dev:
		return errors.New("ADMIN_TOKEN is the development default: set your own, or pass -dev")
	case len(c.TokenKey) < registry.MinKeyLen:
		return fmt.Errorf("TOKEN_KEY must be at least %d bytes: generate one with `openssl rand -hex 32`, or pass -dev for the development default", registry.MinKeyLen)
	case c.TokenKey == devTokenKey && !c.Dev:
		return errors.New("TOKEN_KEY is the development default: set your own, or pass -dev")
	case c.TokenKeyPrevious != "" && len(c.TokenKeyPrevious) < registry.MinKeyLen:
		return fmt.Errorf("TOKEN_KEY_PREVIOUS must be at least %d bytes", registry.MinKeyLen)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("HTTP_TLS_CERT and HTTP_TLS_KEY go together")
	case c.MaxBodyBytes < 64:
		return fmt.Errorf("MAX_BODY_BYTES=%d is too small", c.MaxBodyBytes)
	case c.DiscardBodyBytes < 0:
		return errors.New("DISCARD_BODY_BYTES must not be negative")
	case c.MaxInFlight < 1:
		return errors.New("MAX_IN_FLIGHT must be at least 1")
	case c.PublishMaxEvents < 1 || c.PublishMaxPending < 1:
		return errors.New("PUBLISH_MAX_EVENTS and PUBLISH_MAX_PENDING must be at least 1")
	case c.DeviceRate < 0 || (c.DeviceRate > 0 && c.DeviceBurst < 1):
		return errors.New("DEVICE_RATE must not be negative, and DEVICE_BURST must be at least 1 when it is set")
	case c.OutcomeTimeout <= 0 || c.QueryTimeout <= 0:
		return errors.New("OUTCOME_TIMEOUT and QUERY_TIMEOUT must be positive")
	case c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.WriteTimeout <= 0 || c.IdleTimeout <= 0:
		return errors.New("HTTP timeouts must be positive")
	case c.WriteTimeout <= c.OutcomeTimeout:
		return errors.New("HTTP_WRITE_TIMEOUT must exceed OUTCOME_TIMEOUT")
	case c.RegistryBucket == "":
		return errors.New("REGISTRY_BUCKET is empty")
	case c.AuditMaxAge < time.Hour:
		return errors.New("AUDIT_MAX_AGE must be at least 1h")
	case c.Guard.BodyMemory < api.BodyCopies*c.MaxBodyBytes:
		return errors.New("MAX_BODY_MEMORY must hold at least three copies of MAX_BODY_BYTES")
	}
	if err := c.Guard.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}
