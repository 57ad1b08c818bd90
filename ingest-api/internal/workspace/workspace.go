package workspace

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// The workspace API's door: who may call what. One table of routes and the
// least role each needs, the key that authenticates a request, and the
// bound on concurrent reads.

// AdminPrefix starts every workspace API path.
const AdminPrefix = "/api/v1/admin"

// WorkspaceRoute is a route of the workspace API and the least role that
// may call it (each role may do what the ones below it may).
type WorkspaceRoute struct {
	Method, Path string
	Role         adminkeys.Role
	handler      echo.HandlerFunc
}

// workspaceRoutes is the one table of the workspace API's routes and
// roles: viewers read, operators change devices, mappings and tokens and
// replay dead letters and start backfills, admins manage keys and read the audit trail.
func (s *Server) workspaceRoutes() []WorkspaceRoute {
	const v, o, a = adminkeys.Viewer, adminkeys.Operator, adminkeys.Admin
	return []WorkspaceRoute{
		{http.MethodGet, "/whoami", v, s.whoami},
		{http.MethodGet, "/devices", v, s.listDevices},
		{http.MethodGet, "/entities", v, s.listEntities},
		{http.MethodGet, "/devices/:serial", v, s.getDevice},
		{http.MethodGet, "/devices/:serial/messages", v, s.deviceMessages},
		{http.MethodGet, "/devices/:serial/diagnostics", v, s.deviceDiagnostics},
		{http.MethodGet, "/devices/:serial/backfills", v, s.listBackfills},
		{http.MethodGet, "/fleet", v, s.fleet},
		{http.MethodGet, "/entities/:entity/inputs/:input/latest", v, s.latest},
		{http.MethodGet, "/entities/:entity/inputs/:input/series", v, s.series},
		{http.MethodPut, "/devices/:serial", o, s.putDevice},
		{http.MethodDelete, "/devices/:serial", o, s.deleteDevice},
		{http.MethodPost, "/devices/:serial/backfills", o, s.startBackfill},
		{http.MethodDelete, "/devices/:serial/backfills/:id", o, s.cancelBackfill},
		{http.MethodPost, "/devices/:serial/tokens", o, s.addToken},
		{http.MethodPost, "/devices/:serial/tokens/:name/promote", o, s.promoteToken},
		{http.MethodDelete, "/devices/:serial/tokens/:name", o, s.retireToken},
		{http.MethodPost, "/devices/:serial/tokens/:name/reveal", o, s.revealToken},
		{http.MethodGet, "/deadletters", o, s.listDeadLetters},
		{http.MethodPost, "/deadletters/replay", o, s.replayDeadLetters},
		{http.MethodGet, "/keys", a, s.listKeys},
		{http.MethodPost, "/keys", a, s.createKey},
		{http.MethodDelete, "/keys/:name", a, s.revokeKey},
		{http.MethodGet, "/audit", a, s.listAudit},
	}
}

// WorkspaceRoutes is the table of routes and roles, for tests and docs.
func WorkspaceRoutes() []WorkspaceRoute { return (&Server{}).workspaceRoutes() }

// authenticateAdmin lets through requests with a workspace key (or the
// bootstrap ADMIN_TOKEN) that has not expired, and notes who sent them. A
// client address that keeps sending wrong ones is refused as one that
// keeps failing device authentication is (the two listeners share the
// count: guessing on one is refused on both).
func (s *Server) authenticateAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		src := s.Proxies.Client(c.Request())
		if wait, refused := s.Failures.Refused(src); refused {
			return s.refuse(c, wait)
		}
		id, ok := s.AdminKeys.Authenticate(edge.Bearer(c.Request().Header.Get(echo.HeaderAuthorization)), time.Now())
		if !ok {
			if _, over := s.Failures.Fail(src); over {
				wait, _ := s.Failures.Refused(src)
				return s.refuse(c, wait)
			}
			return s.respond(c, outcome.Unauthorized, edge.Clip(c.Param("serial")), "", "")
		}
		c.Set(identityKey, id)
		return next(c)
	}
}

// refuse answers a client address refused for failing too often: when to
// come back, and the connection closed (its body, a workspace request's, is
// not read).
func (s *Server) refuse(c echo.Context, wait time.Duration) error {
	edge.RetryAfter(c, wait)
	c.Response().Header().Set(echo.HeaderConnection, "close")
	return s.respond(c, outcome.SourceRefused, "", "", "")
}

const identityKey = "workspace.identity"

// caller is who sent an authenticated workspace request.
func caller(c echo.Context) adminkeys.Identity {
	id, _ := c.Get(identityKey).(adminkeys.Identity)
	return id
}

// requireRole answers 403 to a key whose role is below need.
func (s *Server) requireRole(need adminkeys.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if id := caller(c); !id.Role.Allows(need) {
				return s.respond(c, outcome.Forbidden, "", "", fmt.Sprintf("key %s has role %s; this needs %s", edge.Clip(id.Name), id.Role, need))
			}
			return next(c)
		}
	}
}
