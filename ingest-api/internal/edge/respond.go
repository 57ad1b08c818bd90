// Package edge is what ingest-api's two HTTP listeners share: the
// contract's answers (one outcome table rendered in one place), their
// counting and logging, the request metrics, and reading a bearer token.
// The device door (internal/api) and the workspace (internal/workspace)
// each build their routes on it.
package edge

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Body is every response of the ingestion contract, and of every error.
type Body struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

// BodyFor renders an outcome: the single place where internal outcomes
// become response bodies.
func BodyFor(code outcome.Code, serial, detail string) (int, Body) {
	row := outcome.Lookup(code)
	if code == outcome.Stored {
		return row.Status, Body{Success: true, Message: row.Message}
	}
	return row.Status, Body{Message: row.Message, Error: row.Error(serial, detail)}
}

// Answers renders, counts and logs the answers of one or more listeners.
type Answers struct {
	log     *zap.Logger
	metrics *requestMetrics
}

// NewAnswers returns the answers of a program that logs to log and counts
// into reg: built once per program, so that both listeners count in the
// same series.
func NewAnswers(log *zap.Logger, reg prometheus.Registerer) *Answers {
	return &Answers{log: log, metrics: newRequestMetrics(reg)}
}

// Respond writes the outcome and, for anything but success, logs one line
// (the logger samples repeated lines, and client text is cut to
// logTextMax). No token is ever passed in here, so none can reach the log.
func (s *Answers) Respond(c echo.Context, code outcome.Code, serial, eventID, detail string) error {
	status, body := s.Outcome(c, code, serial, detail)
	if code == outcome.Stored {
		// The one answer of the hot path, rendered once.
		return c.JSONBlob(status, storedJSON)
	}
	fields := []zap.Field{
		zap.String("outcome", code.String()),
		zap.Int("status", status),
		zap.String("serial", Clip(serial)),
		zap.String("message", body.Message),
		zap.String("error", Clip(body.Error)),
		zap.String("remote", c.RealIP()),
	}
	if eventID != "" {
		fields = append(fields, zap.String("event_id", eventID))
	}
	switch {
	case code == outcome.Overloaded:
		// One line per shed request would add load exactly when the
		// process has too much.
		s.log.Debug("request shed", fields...)
	case status >= 500:
		s.log.Warn("request failed", fields...)
	default:
		s.log.Info("request rejected", fields...)
	}
	return c.JSON(status, body)
}

// Outcome renders code, counts it and sets Retry-After where it applies.
func (s *Answers) Outcome(c echo.Context, code outcome.Code, serial, detail string) (int, Body) {
	status, body := BodyFor(code, serial, detail)
	s.metrics.countOutcome(code, status)
	if row := outcome.Lookup(code); row.RetryAfter > 0 && c.Response().Header().Get("Retry-After") == "" {
		c.Response().Header().Set("Retry-After", strconv.Itoa(row.RetryAfter))
	}
	return status, body
}

// logTextMax is the most of a client's text (a serial, an error that
// quotes one) a log line carries: a flood of 256 KiB serials must not
// write 256 KiB per line.
const logTextMax = 128

// Clip cuts client text to logTextMax bytes for a log line or a metric,
// saying how long it was; answers keep the spec's texts whole.
func Clip(s string) string {
	if len(s) <= logTextMax {
		return s
	}
	return strings.ToValidUTF8(s[:logTextMax], "") + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

// storedJSON is the success answer, byte for byte what c.JSON renders.
var storedJSON = func() []byte {
	_, body := BodyFor(outcome.Stored, "", "")
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}()

// HandleError turns whatever escapes a handler (unknown route, wrong
// method, panic) into the contract's JSON shape.
func (s *Answers) HandleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	code := outcome.Internal
	detail := "internal error"
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			code = outcome.RouteNotFound
		case http.StatusMethodNotAllowed:
			code = outcome.MethodNotAllowed
		case http.StatusRequestEntityTooLarge:
			code = outcome.PayloadTooLarge
		case http.StatusUnauthorized:
			code = outcome.Unauthorized
		case http.StatusBadRequest:
			code, detail = outcome.BadRequest, "malformed request"
		}
	} else {
		s.log.Error("handler failed", zap.String("path", c.Path()), zap.Error(err))
	}
	status, body := s.Outcome(c, code, "", detail)
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, body)
}

// OrEmpty is s, or an empty slice for nil: a list answers [] rather than
// null.
func OrEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
