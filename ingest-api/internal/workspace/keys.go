package workspace

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/audit"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// whoami: GET /whoami tells the console which key signed in, and its role.
func (s *Server) whoami(c echo.Context) error {
	return c.JSON(http.StatusOK, caller(c))
}

func (s *Server) listKeys(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{"keys": s.AdminKeys.List()})
}

// newKey is the body of POST /keys.
type newKey struct {
	Name    string         `json:"name"`
	Role    adminkeys.Role `json:"role"`
	Expires *time.Time     `json:"expires"`
}

// createKey: POST /keys answers the key and its secret, shown this once.
func (s *Server) createKey(c echo.Context) error {
	var req newKey
	if err := decodeStrict(c, &req); err != nil {
		return s.respond(c, outcome.BadRequest, "", "", "key must be a JSON object {name, role, expires?}: "+err.Error())
	}
	if dotSegment(req.Name) {
		return s.respond(c, outcome.BadRequest, "", "", `a key's name may not be "." or "..": no URL can name it`)
	}
	k, secret, err := s.AdminKeys.Create(c.Request().Context(), req.Name, req.Role, req.Expires, caller(c).Name, time.Now())
	if err != nil {
		return s.changeError(c, "", err)
	}
	s.record(c, "key.created", k.Name, nil, k)
	return c.JSON(http.StatusCreated, map[string]any{"key": k, "secret": secret})
}

// revokeKey: DELETE /keys/{name}; the key is refused from then on.
func (s *Server) revokeKey(c echo.Context) error {
	k, err := s.AdminKeys.Revoke(c.Request().Context(), c.Param("name"))
	if err != nil {
		return s.changeError(c, "", err)
	}
	s.record(c, "key.revoked", k.Name, k, nil)
	return c.JSON(http.StatusOK, map[string]any{"key": k})
}

// listAudit: GET /audit?actor=&action=&target=&since=&before=&limit=,
// newest first; next is the before of the following page.
func (s *Server) listAudit(c echo.Context) error {
	q := c.QueryParams()
	f := audit.Filter{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	var err error
	if f.Limit, err = parseLimit(q.Get("limit"), 100, audit.MaxLimit); err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return s.respond(c, outcome.BadRequest, "", "", "before must be the next cursor of an earlier page")
		}
		f.Before = n
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return s.respond(c, outcome.BadRequest, "", "", "since must be an RFC 3339 time")
		}
		f.Since = t
	}
	if s.Audit == nil {
		return c.JSON(http.StatusOK, map[string]any{"records": []audit.Record{}})
	}
	recs, next, err := s.Audit.List(c.Request().Context(), f)
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, "", "", err.Error())
	}
	body := map[string]any{"records": edge.OrEmpty(recs)}
	if next > 0 {
		body["next"] = strconv.FormatUint(next, 10)
	}
	return c.JSON(http.StatusOK, body)
}

// record adds a change to the audit trail: who (the request's key), what
// (action on target, before and after; callers pass views that hold no
// token), when and from where. The change is made already: a record that
// cannot be kept is logged with everything but before and after, and
// counted (ingest_api_audit_failures_total), not answered as a failure.
func (s *Server) record(c echo.Context, action, target string, before, after any) {
	if s.Audit == nil {
		return
	}
	id := caller(c)
	r := audit.Record{Actor: id.Name, Role: string(id.Role), Action: action, Target: target, Source: c.RealIP(),
		Before: rawJSON(before), After: rawJSON(after)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 5*time.Second)
	defer cancel()
	if err := s.Audit.Record(ctx, r); err != nil {
		s.auditFailures.Inc()
		s.Log.Error("audit record not kept", zap.String("action", action), zap.String("target", edge.Clip(target)),
			zap.String("actor", id.Name), zap.String("remote", r.Source), zap.Error(err))
	}
}

func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}
