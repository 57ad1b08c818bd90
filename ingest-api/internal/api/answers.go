package api

import (
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// The device door answers through the program's edge.Answers, shared with
// the workspace listener.

// Body is every response of the ingestion contract, and of every error.
type Body = edge.Body

// BodyFor renders an outcome (edge.BodyFor).
func BodyFor(code outcome.Code, serial, detail string) (int, Body) {
	return edge.BodyFor(code, serial, detail)
}

// Clip cuts client text for a log line or a metric (edge.Clip).
func Clip(s string) string { return edge.Clip(s) }

func (s *Server) respond(c echo.Context, code outcome.Code, serial, eventID, detail string) error {
	return s.answers.Respond(c, code, serial, eventID, detail)
}

func bearer(h string) string { return edge.Bearer(h) }

func setRetryAfter(c echo.Context, wait time.Duration) { edge.RetryAfter(c, wait) }
