// Package api is ingest-api's device door, the listener at HTTP_ADDR: the
// device ingestion endpoints, health checks and the device API's OpenAPI
// document, all answering in the contract's JSON. The workspace API and the
// console have a listener of their own (internal/workspace).
package api

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/ingest-api/internal/redact"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/ingest-api/internal/submit"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Limits bound the work one process takes on.
type Limits struct {
	MaxBodyBytes int64
	// DiscardBytes is how much of a refused body is read and dropped so
	// that a client writing its whole body first still reads the answer.
	DiscardBytes int64
	MaxInFlight  int
	// MaxBatchMessages is the most messages one backlog request holds.
	MaxBatchMessages int
	// BodyMinRate is the slowest a body may arrive after a grace period,
	// in bytes a second (0: no pacing); BodyTimeout is the most a body
	// may take in all (the server's read timeout).
	BodyMinRate int64
	BodyTimeout time.Duration
	// ReadingTime bounds the reading times devices send.
	ReadingTime readtime.Bounds
}

// Deps is everything the device door needs, passed in by main.
type Deps struct {
	Log       *zap.Logger
	Answers   *edge.Answers // nil: a logger-only one, counted nowhere
	Registry  *registry.Store
	Submitter *submit.Submitter  // device events go into the pipeline through it
	Replies   string             // where the workers send this copy's outcomes
	Query     *query.Client      // readiness: a writer answers on the storage path
	Limiter   *ratelimit.Limiter // nil: no per-device limit
	Failures  *guard.Failures    // nil: no address is refused
	Budget    *guard.Budget      // nil: bodies' memory is not bounded
	Work      *guard.Work        // nil: costly bodies are not queued
	Proxies   guard.Proxies      // whose X-Forwarded-For names the client
	Redactor  *redact.Redactor   // nil: only the request's tokens are removed
	Keys      *registry.Keyring  // TOKEN_KEY: device tokens' digests and sealed copies
	Tally     *diag.Tally        // nil: device diagnostics are not counted
	Limits    Limits
	Metrics   prometheus.Registerer // nil: not exported
}

// Server holds the handlers' state: its dependencies as New was given
// them, and what it keeps itself.
type Server struct {
	Deps
	answers   *edge.Answers
	cache     *registry.Cache
	inflight  chan struct{}
	probes    *guard.Failures // health checks per address, counted as failures are (health.go)
	lastTS    atomic.Int64
	draining  atomic.Bool
	readiness atomic.Pointer[error] // nil: not checked yet
}

// New builds the device door's Echo instance: the device endpoints, health
// and the device API's document, nothing else.
func New(d Deps) (*echo.Echo, *Server) {
	s := &Server{
		Deps:     d,
		answers:  d.Answers,
		cache:    d.Registry.Cache(),
		inflight: make(chan struct{}, d.Limits.MaxInFlight),
		probes:   guard.NewFailures(probeLimit, probeWindow),
	}
	if s.Redactor == nil {
		s.Redactor = redact.New("")
	}
	if s.answers == nil {
		s.answers = edge.NewAnswers(d.Log, nil)
	}
	registerMetrics(d.Metrics, s)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// The peer's address, not a header a client can write, unless the
	// peer is a configured proxy (TRUSTED_PROXIES).
	e.IPExtractor = func(r *http.Request) string { return d.Proxies.Client(r).String() }
	e.HTTPErrorHandler = s.answers.HandleError
	e.Use(markBusy, s.answers.TimeRoutes, middleware.Recover())

	routeDevice(e, EventPath, s.postEvent)
	routeDevice(e, EventsPath, s.postEvents)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(openapi.Path, func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapi.Device) })
	return e, s
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
