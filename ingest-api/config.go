package main

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/api"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/program"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/retention"
)

// devAdminToken is the token `make run` uses when ADMIN_TOKEN is unset. The
// program refuses it unless -dev is given.
const devAdminToken = "dev-admin-token"

// minAdminToken is ADMIN_TOKEN's shortest length: it opens the whole
// workspace, and a guesser has 20 tries a minute per address.
const minAdminToken = 16

// devTokenKey is the TOKEN_KEY of -dev when none is given: a development
// registry's tokens are not protected by it.
const devTokenKey = "dev-token-key-not-secret-0123456789abcdef"

// Fixed bounds of the HTTP server (docs/configuration.md says why they
// need no setting).
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second // a whole request; BODY_MIN_RATE cuts slow bodies sooner
	idleTimeout       = 120 * time.Second
	shutdownTimeout   = 15 * time.Second // in-flight requests' time to be answered on SIGTERM
	queryTimeout      = 5 * time.Second  // a workspace read's wait for writer-worker
	// writeSlack is what an answer may take beyond OUTCOME_TIMEOUT.
	writeSlack = 25 * time.Second
	// discardFactor: a refused body is read and dropped up to this many
	// times MAX_BODY_BYTES, so that clients that write their whole body
	// before reading get the 413 instead of a broken pipe.
	discardFactor = 16
)

// Config is ingest-api's whole configuration.
type Config struct {
	HTTPAddr         string
	WorkspaceAddr    string
	MetricsAddr      string
	TLSCert, TLSKey  string
	AdminToken       string
	TokenKey         string // the current key, then optionally ",<the previous one>"
	Dev              bool
	MaxBodyBytes     int64
	MaxInFlight      int
	DeviceRate       float64
	DeviceBurst      int
	OutcomeTimeout   time.Duration
	ClaimFirst       bool
	ReadingTime      readtime.Bounds
	MaxBatchMessages int
	RedactKeys       string
	Retention        retention.Config // the audit trail's
	NATS             bus.Config
	Guard            guard.Config
}

// Register adds every setting as a flag and environment variable.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address of the device endpoints (the device port)")
	s.String(&c.WorkspaceAddr, "workspace-addr", "127.0.0.1:8084", "HTTP listen address of the workspace API and the console; keep it off the public network")
	s.String(&c.MetricsAddr, "metrics-addr", "127.0.0.1:8083", "address of the operations listener: /metrics, /healthz, /readyz, /debug/pprof (empty: off); keep it off the public network")
	s.String(&c.TLSCert, "http-tls-cert", "", "certificate file: serve HTTPS when set")
	s.String(&c.TLSKey, "http-tls-key", "", "key file for -http-tls-cert")
	s.Secret(&c.AdminToken, "admin-token", "bearer token of the workspace API")
	s.Secret(&c.TokenKey, "token-key", "secret of at least 32 bytes (64 hex digits from a random source) under which device tokens are kept as keyed digests and sealed copies, then optionally a comma and the key it replaces (records made under that one are rewritten: docs/operations.md); only ingest-api holds it")
	s.Bool(&c.Dev, "dev", false, "development mode: allow the built-in admin token and token key")
	s.Int64(&c.MaxBodyBytes, "max-body-bytes", 1<<20, "largest request body accepted (413 beyond)")
	s.Int(&c.MaxInFlight, "max-in-flight", 256*runtime.GOMAXPROCS(0), "authenticated requests in the pipeline at once (default 256 per core; bodies being read do not count: MAX_BODY_MEMORY bounds them); 503 + Retry-After beyond")
	s.Float64(&c.DeviceRate, "device-rate", 100, "readings per second one device may post, a backlog counting each of its messages (0: no limit); 429 beyond")
	s.Int(&c.DeviceBurst, "device-burst", 1000, "readings one device may post at once above its rate (a larger backlog takes the whole burst)")
	s.Duration(&c.OutcomeTimeout, "outcome-timeout", 5*time.Second, "how long a request waits for the storage outcome")
	s.Bool(&c.ClaimFirst, "claim-first", false, "publish a keyed request's events only once its claim is decided, as releases before 2026-11-29 did (a round trip more); set it while any mapper-worker or writer-worker of an earlier release runs (docs/guarantees.md)")
	s.Int(&c.MaxBatchMessages, "max-batch-messages", 1000, "most messages in one backlog request (POST /api/v1/deviceapi/events); 413 beyond")
	s.Duration(&c.ReadingTime.MaxAge, "max-reading-age", 90*24*time.Hour, "oldest reading time accepted (ts or the timestamp input); an older one is stored at its receive time, with a note")
	s.String(&c.RedactKeys, "redact-keys", "accessToken,access_token,password,secret", "comma-separated member names whose values are replaced by \"[redacted]\" at any depth of a message before it is kept (the request's own tokens are removed wherever they appear, whatever this says)")
	c.Retention.Register(s)
	c.NATS.Register(s)
	c.Guard.Register(s, program.ContainerMemory())
}

// TokenKeys are TOKEN_KEY's current and previous keys.
func (c *Config) TokenKeys() (current, previous string) {
	current, previous, _ = strings.Cut(c.TokenKey, ",")
	return current, previous
}

// Validate reports the first thing wrong, in one line.
func (c *Config) Validate() error {
	d := c.withDevDefaults()
	key, previous := d.TokenKeys()
	switch {
	case c.MaxBatchMessages < 1:
		return errors.New("MAX_BATCH_MESSAGES must be at least 1")
	case c.ReadingTime.MaxAge <= 0:
		return errors.New("MAX_READING_AGE must be positive")
	case c.HTTPAddr == "":
		return errors.New("HTTP_ADDR is empty")
	case c.WorkspaceAddr == "" || c.WorkspaceAddr == c.HTTPAddr || c.WorkspaceAddr == c.MetricsAddr:
		return errors.New("WORKSPACE_ADDR must be set, apart from HTTP_ADDR and METRICS_ADDR: the workspace API and the console have a listener of their own")
	case d.AdminToken == "":
		return errors.New("ADMIN_TOKEN is empty: set it, or pass -dev for the development default")
	case d.AdminToken == devAdminToken && !c.Dev:
		return errors.New("ADMIN_TOKEN is the development default: set your own, or pass -dev")
	case len(d.AdminToken) < minAdminToken && d.AdminToken != devAdminToken:
		return fmt.Errorf("ADMIN_TOKEN must be at least %d bytes: generate one with `openssl rand -hex 32`", minAdminToken)
	case len(key) < registry.MinKeyLen || (previous != "" && len(previous) < registry.MinKeyLen):
		return fmt.Errorf("TOKEN_KEY must be at least %d bytes (and so must the previous key after a comma): generate one with `openssl rand -hex 32`, or pass -dev for the development default", registry.MinKeyLen)
	case key == devTokenKey && !c.Dev:
		return errors.New("TOKEN_KEY is the development default: set your own, or pass -dev")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("HTTP_TLS_CERT and HTTP_TLS_KEY go together")
	case c.MaxBodyBytes < 64:
		return fmt.Errorf("MAX_BODY_BYTES=%d is too small", c.MaxBodyBytes)
	case c.MaxInFlight < 1:
		return errors.New("MAX_IN_FLIGHT must be at least 1")
	case c.DeviceRate < 0 || (c.DeviceRate > 0 && c.DeviceBurst < 1):
		return errors.New("DEVICE_RATE must not be negative, and DEVICE_BURST must be at least 1 when it is set")
	case c.OutcomeTimeout <= 0:
		return errors.New("OUTCOME_TIMEOUT must be positive")
	case c.Guard.BodyMemory < api.BodyCopies*c.MaxBodyBytes:
		return errors.New("MAX_BODY_MEMORY must hold at least three copies of MAX_BODY_BYTES")
	}
	if err := c.Retention.Validate(); err != nil {
		return err
	}
	if err := c.Guard.Validate(); err != nil {
		return err
	}
	return c.NATS.Validate()
}

// withDevDefaults is c with -dev's built-in admin token and token key where
// none is given.
func (c Config) withDevDefaults() Config {
	if c.Dev && c.AdminToken == "" {
		c.AdminToken = devAdminToken
	}
	if c.Dev && c.TokenKey == "" {
		c.TokenKey = devTokenKey
	}
	return c
}
