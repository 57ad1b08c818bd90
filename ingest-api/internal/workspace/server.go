// Package workspace is ingest-api's admin plane, the listener at
// WORKSPACE_ADDR: the workspace API (devices, tokens, reads of stored data,
// diagnostics, backfills, dead letters, keys, the audit trail) and the
// console that uses it. It is apart from the device door (internal/api), so
// that the device endpoint can face the internet while this stays private.
package workspace

import (
	"net/http"
	"runtime"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/audit"
	"github.com/devicehub/eventservice/ingest-api/internal/console"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/metrics"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Deps is everything the workspace needs, passed in by main.
type Deps struct {
	Log       *zap.Logger
	Answers   *edge.Answers // nil: a logger-only one, counted nowhere
	Registry  *registry.Store
	Keys      *registry.Keyring // TOKEN_KEY: device tokens' digests and sealed copies
	AdminKeys *adminkeys.Store  // the workspace API's keys (ADMIN_TOKEN the bootstrap one)
	Audit     *audit.Log        // nil: changes are not recorded
	Backfills *backfill.Store   // backfill jobs, run by writer-worker
	Query     *query.Client     // reads, answered by writer-worker
	JS        jetstream.JetStream
	Names     bus.Names          // streams and subjects shared with the workers
	Limiter   *ratelimit.Limiter // a deleted device's rate is forgotten
	Failures  *guard.Failures    // shared with the device door; nil: no address is refused
	Proxies   guard.Proxies      // whose X-Forwarded-For names the client
	Metrics   prometheus.Registerer
}

// Server holds the handlers' state.
type Server struct {
	Deps
	answers       *edge.Answers
	cache         *registry.Cache
	reads         chan struct{} // reads at once: each may hold a page of ~4 MiB, decoded and encoded
	readBytes     *paceBudget   // bytes of reads answered per second (readbound.go)
	readTime      *paceBudget   // seconds of reads per second
	auditFailures prometheus.Counter
}

// New builds the workspace listener's Echo instance: the console, the
// workspace API and its document.
func New(d Deps) *echo.Echo {
	s := &Server{
		Deps:      d,
		answers:   d.Answers,
		cache:     d.Registry.Cache(),
		reads:     make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
		readBytes: newPaceBudget(readBytesPerSec, readBurst),
		readTime:  newPaceBudget(readShare, readTimeBurst),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metrics.Ingest, Name: "audit_failures_total",
			Help: "Workspace changes made whose audit record the audit stream did not accept (each is logged).",
		}),
	}
	if s.answers == nil {
		s.answers = edge.NewAnswers(d.Log, nil)
	}
	metrics.Or(d.Metrics).MustRegister(s.auditFailures)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = func(r *http.Request) string { return d.Proxies.Client(r).String() }
	e.HTTPErrorHandler = s.answers.HandleError
	e.Pre(escapedPath)
	e.Use(s.answers.TimeRoutes, middleware.Recover())
	e.GET(openapi.Path, func(c echo.Context) error { return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openapi.Workspace) })

	// The console: static pages that use the workspace API below.
	ui := echo.WrapHandler(console.New())
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, console.Prefix) })
	e.GET(console.Prefix+"*", ui)
	e.HEAD(console.Prefix+"*", ui)

	admin := e.Group(AdminPrefix, s.decodeParams, s.authenticateAdmin, s.boundReads)
	for _, r := range s.workspaceRoutes() {
		admin.Add(r.Method, r.Path, r.handler, s.requireRole(r.Role))
	}
	return e
}

func (s *Server) respond(c echo.Context, code outcome.Code, serial, eventID, detail string) error {
	return s.answers.Respond(c, code, serial, eventID, detail)
}
