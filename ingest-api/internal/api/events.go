package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

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
		req, code, detail = parseBatch(body, headerToken, s.limits.MaxBatchMessages)
		return req.Serial, req.BodyToken, len(req.Messages), code, detail
	}, func(a authorized) error {
		for i := range req.Messages {
			req.Messages[i].Payload = s.redactor.Apply(req.Messages[i].Payload, a.secrets...)
		}
		return s.publishBacklog(c, req, a)
	})
}

// publishBacklog publishes an accepted backlog's well-formed messages as
// one unit and answers with their results.
func (s *Server) publishBacklog(c echo.Context, req batchRequest, a authorized) error {
	key := strings.TrimSpace(c.Request().Header.Get(HeaderIdempotencyKey))
	group := uuid.NewString()
	if key != "" {
		group = KeyedEventID(req.Serial, "backlog\x00"+key)
	}
	codes := make([]outcome.Code, len(req.Messages))
	details := make([]string, len(req.Messages))
	var evs []*event.Event
	var at []int // the message index of each event
	var ids []string
	size := 0
	for i, m := range req.Messages {
		if m.Code != outcome.Stored {
			codes[i] = m.Code
			continue
		}
		ev := &event.Event{Serial: req.Serial, ReceivedNs: s.timestamp(), Rev: a.dev.Rev, Token: a.token, Reply: s.waiter.Subject(),
			Payload: m.Payload, Group: group, Keyed: key != ""}
		ev.ReadingNs, ev.TimeNote = s.readingTime(ev.ReceivedNs, m.TS, m.Data, a.dev.Device.TimestampInput)
		if ev.Keyed {
			ev.ID = KeyedEventID(req.Serial, key+"\x00"+strconv.Itoa(i))
		} else {
			ev.ID = uuid.NewString()
		}
		size += event.EnvelopeCost(ev)
		evs, at, ids = append(evs, ev), append(at, i), append(ids, ev.ID)
	}
	if len(evs) == 0 {
		return s.respondBatch(c, req.Serial, codes, details)
	}
	// The whole backlog travels in one envelope beside its mapped values.
	if size+512 > int(s.nc.MaxPayload()/2) {
		return s.respond(c, outcome.PayloadTooLarge, "", "", "")
	}
	replies, cancel := s.waiter.RegisterAll(ids)
	defer cancel()
	published := time.Now()
	var refused <-chan struct{}
	var refusal func() error
	var acked <-chan *jetstream.PubAck
	var keyedErr <-chan error
	if key != "" {
		var data []byte
		for _, ev := range evs {
			data = event.AppendEvent(data, ev)
		}
		fut, err := s.js.PublishMsgAsync(&nats.Msg{Subject: s.names.EventsSubject(), Data: data}, jetstream.WithMsgID(group))
		if err != nil {
			s.metrics.publishErrors.Inc()
			return s.respond(c, outcome.ProcessingFailed, req.Serial, group, "event not accepted: "+err.Error())
		}
		acked, keyedErr = fut.Ok(), fut.Err()
	} else {
		batch, err := s.publisher.AddGroup(evs)
		if err != nil {
			s.metrics.publishErrors.Inc()
			return s.respond(c, outcome.ProcessingFailed, req.Serial, group, "event not accepted: "+err.Error())
		}
		refused, refusal = batch.Failed(), batch.Err
	}

	deadline := published.Add(s.limits.OutcomeTimeout)
	timer := time.NewTimer(s.limits.OutcomeTimeout)
	defer timer.Stop()
	ctx := c.Request().Context()
	pos := make(map[string]int, len(ids))
	for j, id := range ids {
		pos[id] = at[j]
	}
	pending := len(ids)
	for pending > 0 {
		select {
		case r := <-replies:
			if i, ok := pos[r.ID]; ok {
				codes[i], details[i] = r.Code, r.Detail
				delete(pos, r.ID)
				pending--
			}
		case ack := <-acked:
			if ack.Duplicate {
				// An earlier attempt with this key holds the backlog:
				// its results are the answer.
				return s.awaitEarlierBacklog(c, req.Serial, codes, details, pos, replies, deadline)
			}
			acked = nil
		case err := <-keyedErr:
			s.metrics.publishErrors.Inc()
			return s.respond(c, outcome.ProcessingFailed, req.Serial, group, "event not accepted: "+err.Error())
		case <-refused:
			s.metrics.publishErrors.Inc()
			return s.respond(c, outcome.ProcessingFailed, req.Serial, group, "event not accepted: "+refusal().Error())
		case <-timer.C:
			return s.respond(c, outcome.ProcessingFailed, req.Serial, group, "timed out waiting for the storage outcome")
		case <-ctx.Done():
			return nil
		}
	}
	s.metrics.outcomeWait.Observe(time.Since(published).Seconds())
	return s.respondBatch(c, req.Serial, codes, details)
}

// awaitEarlierBacklog answers a retry of a keyed backlog with the results
// of the attempt the stream holds, message by message (pos: event id to its
// message's index).
func (s *Server) awaitEarlierBacklog(c echo.Context, serial string, codes []outcome.Code, details []string, pos map[string]int,
	replies <-chan event.Reply, deadline time.Time) error {
	ids := make([]string, 0, len(pos))
	for id := range pos {
		ids = append(ids, id)
	}
	got, code, detail, ok := s.earlierOutcomes(c, ids, replies, deadline)
	switch {
	case !ok:
		return nil
	case code != outcome.Stored:
		return s.respond(c, code, serial, "", detail)
	}
	for id, r := range got {
		codes[pos[id]], details[pos[id]] = r.Code, r.Detail
	}
	return s.respondBatch(c, serial, codes, details)
}

// respondBatch answers a backlog whose messages all have an outcome: 503
// when its insert failed (nothing of it is stored), 200 and success when
// every message is stored, else 200, success false and how many were not.
func (s *Server) respondBatch(c echo.Context, serial string, codes []outcome.Code, details []string) error {
	results := make([]Body, len(codes))
	notStored, failed := 0, -1
	for i, code := range codes {
		_, results[i] = BodyFor(code, serial, details[i])
		if code != outcome.Stored {
			notStored++
		}
		if outcome.Lookup(code).Status >= 500 && failed < 0 {
			failed = i
		}
	}
	code, detail := outcome.Stored, ""
	switch {
	case failed >= 0:
		code, detail = codes[failed], details[failed]
	case notStored > 0:
		code, detail = outcome.PartlyStored, fmt.Sprintf("%d of %d messages were not stored", notStored, len(codes))
	}
	status, body := s.outcome(c, code, serial, detail)
	if code != outcome.Stored {
		s.log.Info("backlog not stored whole", zap.String("outcome", code.String()), zap.Int("status", status), zap.String("serial", Clip(serial)),
			zap.String("message", body.Message), zap.String("error", Clip(body.Error)), zap.String("remote", c.RealIP()))
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
