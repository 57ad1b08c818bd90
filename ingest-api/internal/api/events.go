package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// BatchBody is the answer of the backlog endpoint once its messages were
// looked at: the spec's three fields for the request, and one result per
// message, in order.
type BatchBody struct {
	Body
	Results []Body `json:"results"`
}

// postEvents is POST /api/v1/deviceapi/events: a backlog of messages in one
// request. The request is checked as the single endpoint checks one; its
// well-formed messages travel the pipeline as one unit (one JetStream
// message, one envelope, one insert) and each gets its own result.
func (s *Server) postEvents(c echo.Context) error {
	var req batchRequest
	return s.ingest(c, func(body []byte, headerToken string) (string, string, int, outcome.Code, string) {
		var code outcome.Code
		var detail string
		req, code, detail = parseBatch(body, headerToken, s.Limits.MaxBatchMessages)
		return req.Serial, req.BodyToken, len(req.Messages), code, detail
	}, func(a authorized) error { return s.publishBacklog(c, req, a) })
}

// publishBacklog submits an accepted backlog's well-formed messages as one
// unit and answers with their results.
func (s *Server) publishBacklog(c echo.Context, req batchRequest, a authorized) error {
	key := strings.TrimSpace(c.Request().Header.Get(HeaderIdempotencyKey))
	group, claimID := uuid.NewString(), ""
	if key != "" {
		group = KeyedEventID(req.Serial, "backlog\x00"+key)
		claimID = event.ClaimID("", group) // one claim for the backlog
	}
	results := make([]event.Reply, len(req.Messages))
	var evs []*event.Event
	var at []int // the message index of each event
	for i, m := range req.Messages {
		if m.Code != outcome.Stored {
			results[i].Code = m.Code
			continue
		}
		ev := s.newEvent(eventID(req.Serial, key, "\x00"+strconv.Itoa(i)), req.Serial, a, m.Payload, m.TS, m.Data)
		ev.Group = group
		evs, at = append(evs, ev), append(at, i)
	}
	if len(evs) > 0 {
		got, err := s.Submitter.Submit(c.Request().Context(), evs, claimID)
		if err != nil {
			return s.failed(c, a.devReq, group, err)
		}
		for j, r := range got {
			results[at[j]] = r
		}
	}
	return s.respondBatch(c, a.devReq, results)
}

// respondBatch answers a backlog whose messages all have an outcome: 503
// when its insert failed (nothing of it is stored), 200 and success when
// every message is stored, else 200, success false and how many were not.
func (s *Server) respondBatch(c echo.Context, k devReq, replies []event.Reply) error {
	serial := k.serial
	results := make([]Body, len(replies))
	codes := make([]outcome.Code, len(replies))
	notStored, failed := 0, -1
	for i, r := range replies {
		_, results[i] = edge.BodyFor(r.Code, serial, r.Detail)
		codes[i] = r.Code
		if r.Code != outcome.Stored {
			notStored++
		}
		if outcome.Lookup(r.Code).Status >= 500 && failed < 0 {
			failed = i
		}
	}
	code, detail := outcome.Stored, ""
	switch {
	case failed >= 0:
		code, detail = replies[failed].Code, replies[failed].Detail
	case notStored > 0:
		code, detail = outcome.PartlyStored, fmt.Sprintf("%d of %d messages were not stored", notStored, len(replies))
	}
	status, body := s.answers.Outcome(c, code, serial, detail)
	s.count(k, code, detail, 0)
	s.countReadings(k, codes)
	if code != outcome.Stored {
		s.Log.Info("backlog not stored whole", zap.String("outcome", code.String()), zap.Int("status", status), zap.String("serial", edge.Clip(serial)),
			zap.String("message", body.Message), zap.String("error", edge.Clip(body.Error)), zap.String("remote", c.RealIP()))
	}
	// Rendered whole, so that the answer carries a Content-Length (a
	// streamed one over 4 KB would go chunked, which simple device HTTP
	// stacks read badly).
	out, err := json.Marshal(BatchBody{Body: body, Results: results})
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(out)))
	return c.JSONBlob(status, out)
}
