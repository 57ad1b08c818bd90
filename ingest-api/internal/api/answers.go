package api

import (
	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// The device door answers through the program's edge.Answers, shared with
// the workspace listener.

// Body is every response of the ingestion contract, and of every error.
type Body = edge.Body

func (s *Server) respond(c echo.Context, code outcome.Code, serial, eventID, detail string) error {
	return s.answers.Respond(c, code, serial, eventID, detail)
}
