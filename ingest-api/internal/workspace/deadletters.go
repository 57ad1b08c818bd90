package workspace

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/deadletter"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// Dead letters in the workspace API, for operators: the same list and
// replay as `writer-worker dead-letters` (pkg/settle), with each replay in
// the audit trail under the key that asked.

// Bounds of a dead-letter call.
const (
	defaultLetters = 100
	maxLetters     = 1000
	replayTimeout  = time.Minute
)

// listDeadLetters: GET /deadletters?from=&limit=, oldest first; next is
// the from of the following page.
func (s *Server) listDeadLetters(c echo.Context) error {
	var from uint64
	if v := c.QueryParam("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s.respond(c, outcome.BadRequest, "", "", "from must be a sequence number")
		}
		from = n
	}
	limit, err := parseLimit(c.QueryParam("limit"), defaultLetters, maxLetters)
	if err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	letters, err := deadletter.List(c.Request().Context(), s.JS, s.Names, from, limit)
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, "", "", err.Error())
	}
	body := map[string]any{"letters": edge.OrEmpty(letters)}
	if len(letters) == limit {
		body["next"] = strconv.FormatUint(letters[len(letters)-1].Seq+1, 10)
	}
	return c.JSON(http.StatusOK, body)
}

// replayRequest is the body of POST /deadletters/replay: deadletter.ReplayOptions
// with the API's names.
type replayRequest struct {
	From    uint64   `json:"from"`
	Limit   int      `json:"limit"`
	Seqs    []uint64 `json:"seqs"`
	Unkeyed bool     `json:"unkeyed"`
	Keep    bool     `json:"keep"`
}

// replayDeadLetters: POST /deadletters/replay sends letters back to the
// stream they came from once their cause is fixed; each event is stored
// at most once (events sent without an Idempotency-Key only with unkeyed).
func (s *Server) replayDeadLetters(c echo.Context) error {
	var req replayRequest
	if err := decodeStrict(c, &req); err != nil {
		return s.respond(c, outcome.BadRequest, "", "", "replay must be a JSON object {from, limit, seqs, unkeyed, keep}, all optional: "+err.Error())
	}
	if req.Limit == 0 {
		req.Limit = maxLetters
	}
	if req.Limit < 1 || req.Limit > maxLetters || len(req.Seqs) > maxLetters {
		return s.respond(c, outcome.BadRequest, "", "", "limit and seqs: at most "+strconv.Itoa(maxLetters))
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), replayTimeout)
	defer cancel()
	rep, err := deadletter.Replay(ctx, s.JS, s.Names, deadletter.ReplayOptions(req))
	if rep.Replayed > 0 { // what was sent back is a change, even if the rest failed
		s.record(c, "deadletters.replayed", "dead letters", nil, map[string]any{"request": req, "report": rep})
	}
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, "", "", err.Error())
	}
	return c.JSON(http.StatusOK, rep)
}
