// Package api is ingest-api's HTTP surface: the device ingestion endpoint,
// the workspace API, and health checks, all answering in the contract's JSON.
package api

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/audit"
	"github.com/devicehub/eventservice/ingest-api/internal/console"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/ingest-api/internal/redact"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/ingest-api/internal/submit"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/metrics"
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

// Deps is everything the server needs, passed in by main.
type Deps struct {
	Log       *zap.Logger
	Registry  *registry.Store
	Submitter *submit.Submitter // device events go into the pipeline through it
	Replies   string            // where the workers send this copy's outcomes
	Query     *query.Client     // workspace reads, answered by writer-worker
	JS        jetstream.JetStream
	Limiter   *ratelimit.Limiter // nil: no per-device limit
	Failures  *guard.Failures    // nil: no address is refused
	Budget    *guard.Budget      // nil: bodies' memory is not bounded
	Work      *guard.Work        // nil: costly bodies are not queued
	Proxies   guard.Proxies      // whose X-Forwarded-For names the client
	Redactor  *redact.Redactor   // nil: only the request's tokens are removed
	Keys      *registry.Keyring  // TOKEN_KEY: device tokens' digests and sealed copies
	AdminKeys *adminkeys.Store   // the workspace API's keys (ADMIN_TOKEN the bootstrap one)
	Audit     *audit.Log         // nil: changes are not recorded
	Tally     *diag.Tally        // nil: device diagnostics are not counted
	Backfills *backfill.Store    // backfill jobs, run by writer-worker
	Names     bus.Names          // streams and subjects shared with the workers
	Limits    Limits
	Metrics   prometheus.Registerer // nil: not exported
}

// Server holds the handlers' state: its dependencies as New was given
// them, and what it keeps itself.
type Server struct {
	Deps
	cache     *registry.Cache
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
		Deps:     d,
		cache:    d.Registry.Cache(),
		inflight: make(chan struct{}, d.Limits.MaxInFlight),
		reads:    make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
	}
	if s.Redactor == nil {
		s.Redactor = redact.New("")
	}
	s.metrics = newServerMetrics(metrics.Or(d.Metrics), s)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// The peer's address, not a header a client can write, unless the
	// peer is a configured proxy (TRUSTED_PROXIES).
	e.IPExtractor = func(r *http.Request) string { return d.Proxies.Client(r).String() }
	e.HTTPErrorHandler = s.handleError
	e.Pre(deviceSlash)
	e.Use(markBusy, s.metrics.timeRoutes, middleware.Recover())

	e.POST(EventPath, s.postEvent)
	e.POST(EventsPath, s.postEvents)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(openapi.Path, func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapi.Doc) })

	// The console: static pages that use the workspace API below.
	ui := echo.WrapHandler(console.New())
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, console.Prefix) })
	e.GET(console.Prefix+"*", ui)
	e.HEAD(console.Prefix+"*", ui)

	admin := e.Group(AdminPrefix, s.authenticateAdmin, s.boundReads)
	for _, r := range s.workspaceRoutes() {
		admin.Add(r.Method, r.Path, r.handler, s.requireRole(r.Role))
	}
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
