// Package api is ingest-api's HTTP surface: the device ingestion endpoint,
// the workspace API, and health checks, all answering in the contract's JSON.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/console"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/ingest-api/internal/redact"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/ingest-api/internal/publish"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/ingest-api/internal/reply"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Limits bound the work one process takes on.
type Limits struct {
	MaxBodyBytes int64
	// DiscardBytes is how much of a refused body is read and dropped so
	// that a client writing its whole body first still reads the answer.
	DiscardBytes   int64
	MaxInFlight    int
	OutcomeTimeout time.Duration
	QueryTimeout   time.Duration
	// MaxBatchMessages is the most messages one backlog request holds.
	MaxBatchMessages int
	// BodyMinRate is the slowest a body may arrive after a grace period,
	// in bytes a second (0: no pacing); BodyTimeout is the most a body
	// may take in all (HTTP_READ_TIMEOUT).
	BodyMinRate int64
	BodyTimeout time.Duration
	// ReadingTime bounds the reading times devices send.
	ReadingTime readtime.Bounds
}

// Deps is everything the server needs, passed in by main.
type Deps struct {
	Log        *zap.Logger
	NC         *nats.Conn
	JS         jetstream.JetStream
	Registry   *registry.Store
	Waiter     *reply.Waiter
	Publisher  *publish.Publisher // single readings go out through it
	Limiter    *ratelimit.Limiter // nil: no per-device limit
	Failures   *guard.Failures    // nil: no address is refused
	Budget     *guard.Budget      // nil: bodies' memory is not bounded
	Work       *guard.Work        // nil: costly bodies are not queued
	Proxies    guard.Proxies      // whose X-Forwarded-For names the client
	Redactor   *redact.Redactor   // nil: only the request's tokens are removed
	Keys       *registry.Keyring  // TOKEN_KEY: device tokens' digests and sealed copies
	AdminToken string
	Names      bus.Names // streams and subjects shared with the workers
	Limits     Limits
	Metrics    prometheus.Registerer // nil: not exported
}

// Server holds the handlers' state.
type Server struct {
	log       *zap.Logger
	nc        *nats.Conn
	js        jetstream.JetStream
	registry  *registry.Store
	cache     *registry.Cache
	waiter    *reply.Waiter
	publisher *publish.Publisher
	limiter   *ratelimit.Limiter
	failures  *guard.Failures
	budget    *guard.Budget
	work      *guard.Work
	proxies   guard.Proxies
	redactor  *redact.Redactor
	keys      *registry.Keyring
	limits    Limits
	names     bus.Names
	adminSum  [sha256.Size]byte
	inflight  chan struct{}
	reads     chan struct{} // workspace reads at once: each may hold a page of ~4 MiB, decoded and encoded
	lastTS    atomic.Int64
	draining  atomic.Bool
	readiness atomic.Pointer[error] // nil: not checked yet
	metrics   *serverMetrics
}

// New builds the Echo instance with every route.
func New(d Deps) (*echo.Echo, *Server) {
	s := &Server{
		log:       d.Log,
		nc:        d.NC,
		js:        d.JS,
		registry:  d.Registry,
		cache:     d.Registry.Cache(),
		waiter:    d.Waiter,
		publisher: d.Publisher,
		limiter:   d.Limiter,
		failures:  d.Failures,
		budget:    d.Budget,
		work:      d.Work,
		proxies:   d.Proxies,
		redactor:  d.Redactor,
		keys:      d.Keys,
		limits:    d.Limits,
		names:     d.Names,
		adminSum:  sha256.Sum256([]byte(d.AdminToken)),
		inflight:  make(chan struct{}, d.Limits.MaxInFlight),
		reads:     make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
	}
	if s.redactor == nil {
		s.redactor = redact.New("")
	}
	s.metrics = newServerMetrics(metrics.Or(d.Metrics), s)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// The peer's address, not a header a client can write, unless the
	// peer is a configured proxy (TRUSTED_PROXIES).
	e.IPExtractor = func(r *http.Request) string { return d.Proxies.Client(r).String() }
	e.HTTPErrorHandler = s.handleError
	e.Use(markBusy, s.metrics.timeRoutes, middleware.Recover())

	e.POST("/api/v1/deviceapi/event", s.postEvent)
	e.POST("/api/v1/deviceapi/events", s.postEvents)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(openapi.Path, func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapi.Doc) })

	// The console: static pages that use the workspace API below.
	ui := echo.WrapHandler(console.New())
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, console.Prefix) })
	e.GET(console.Prefix+"*", ui)
	e.HEAD(console.Prefix+"*", ui)

	admin := e.Group("/api/v1/admin", s.requireAdmin, s.boundReads)
	admin.GET("/devices", s.listDevices)
	admin.GET("/entities", s.listEntities)
	admin.PUT("/devices/:serial", s.putDevice)
	admin.GET("/devices/:serial", s.getDevice)
	admin.DELETE("/devices/:serial", s.deleteDevice)
	admin.POST("/devices/:serial/tokens", s.addToken)
	admin.POST("/devices/:serial/tokens/:name/promote", s.promoteToken)
	admin.DELETE("/devices/:serial/tokens/:name", s.retireToken)
	admin.POST("/devices/:serial/tokens/:name/reveal", s.revealToken)
	admin.GET("/devices/:serial/messages", s.deviceMessages)
	admin.GET("/entities/:entity/inputs/:input/latest", s.latest)
	admin.GET("/entities/:entity/inputs/:input/series", s.series)
	return e, s
}

// boundReads holds the workspace's reads to half the cores at once (a
// page of messages may be ~4 MiB to pass on, and a writer renders it):
// a read flood leaves the rest to ingestion. A read that waits more than
// a second is answered 503 + Retry-After. Writes pass.
func (s *Server) boundReads(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().Method != http.MethodGet {
			return next(c)
		}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case s.reads <- struct{}{}:
			defer func() { <-s.reads }()
			return next(c)
		case <-t.C:
			return s.respond(c, outcome.Overloaded, "", "", "too many workspace reads at once, retry later")
		case <-c.Request().Context().Done():
			return nil
		}
	}
}

// markBusy marks a request's connection as handling one: a busy
// connection is never closed to make room for another (guard.Conns).
func markBusy(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		defer guard.Busy(c.Request().Context())()
		return next(c)
	}
}

// Drain marks the server not ready, so load balancers stop sending, before
// the listener is shut.
func (s *Server) Drain() { s.draining.Store(true) }

// timestamp returns a receive time in unix nanoseconds that is strictly
// increasing within this process, so that readings received within the same
// millisecond keep their arrival order.
func (s *Server) timestamp() int64 {
	now := time.Now().UnixNano()
	for {
		last := s.lastTS.Load()
		ts := max(now, last+1)
		if s.lastTS.CompareAndSwap(last, ts) {
			return ts
		}
	}
}

// requireAdmin lets through requests with the admin token. A client
// address that keeps sending wrong ones is refused as one that keeps
// failing device authentication is.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		src := s.clientAddr(c)
		if wait, refused := s.failures.Refused(src); refused {
			return s.refuseSource(c, wait)
		}
		tok := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
		sum := sha256.Sum256([]byte(tok))
		if tok == "" || subtle.ConstantTimeCompare(sum[:], s.adminSum[:]) != 1 {
			s.failures.Fail(src)
			return s.respond(c, outcome.Unauthorized, Clip(c.Param("serial")), "", "")
		}
		return next(c)
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, Body{Success: true, Message: "alive"})
}

// readyEvery is how often readiness is checked in the background.
const readyEvery = time.Second

// WatchReady checks readiness every readyEvery until ctx ends; Ready
// answers from the last check, so that no request to /readyz, however
// many, reaches NATS or a writer.
func (s *Server) WatchReady(ctx context.Context) error {
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	for {
		err := s.check(ctx)
		s.readiness.Store(&err)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ready reports nil when, at the last background check, NATS was
// connected, the registry loaded and a writer answered on the storage
// path, and the server is not draining. Both /readyz listeners (the API's
// and METRICS_ADDR's) answer with it.
func (s *Server) Ready(context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	last := s.readiness.Load()
	if last == nil {
		return errors.New("not checked yet")
	}
	return *last
}

// check is one readiness check.
func (s *Server) check(ctx context.Context) error {
	switch {
	case !s.nc.IsConnected():
		return errors.New("nats disconnected")
	case !s.cache.IsSynced():
		return errors.New("registry not loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.ping(ctx); err != nil {
		return fmt.Errorf("storage path: %w", err)
	}
	return nil
}

func (s *Server) readyz(c echo.Context) error {
	if err := s.Ready(c.Request().Context()); err != nil {
		return c.JSON(http.StatusServiceUnavailable, Body{Message: "not ready", Error: err.Error()})
	}
	return c.JSON(http.StatusOK, Body{Success: true, Message: "ready"})
}
