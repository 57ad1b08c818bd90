package api

import (
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/ingest-api/internal/submit"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/jsonobj"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// postEvent is POST /api/v1/deviceapi/event: validate, authenticate against
// the in-memory registry, submit, and answer with the outcome.
func (s *Server) postEvent(c echo.Context) error {
	var req request
	return s.ingest(c, func(body []byte, headerToken string) (string, string, int, outcome.Code, string) {
		var code outcome.Code
		req, code = parse(body, headerToken)
		return req.Serial, req.BodyToken, 1, code, ""
	}, func(a authorized) error { return s.publishEvent(c, req, a) })
}

// publishEvent submits an accepted reading and answers with its outcome.
func (s *Server) publishEvent(c echo.Context, req request, a authorized) error {
	key := strings.TrimSpace(c.Request().Header.Get(HeaderIdempotencyKey))
	ev := s.newEvent(eventID(req.Serial, key, ""), req.Serial, a, req.Payload, req.TS, req.Data)
	claimID := ""
	if key != "" {
		claimID = event.ClaimID(ev.ID, ev.Group)
	}
	got, err := s.Submitter.Submit(c.Request().Context(), []*event.Event{ev}, claimID)
	if err != nil {
		return s.failed(c, a.devReq, ev.ID, err)
	}
	return s.answer(c, a.devReq, got[0].Code, ev.ID, got[0].Detail)
}

// newEvent is an accepted reading of a's device, with its reading time,
// and its payload without a's secrets.
func (s *Server) newEvent(id, serial string, a authorized, payload, ts, data []byte) *event.Event {
	ev := &event.Event{ID: id, Serial: serial, ReceivedNs: s.timestamp(), Rev: a.dev.Rev, Token: a.token,
		Reply: s.Replies, Payload: s.Redactor.Apply(payload, a.secrets...)}
	ev.ReadingNs, ev.TimeNote = s.readingTime(ev.ReceivedNs, ts, data, a.dev.Device.TimestampInput)
	return ev
}

// failed answers a submission that has no outcome per event; a client
// that went away is answered nothing.
func (s *Server) failed(c echo.Context, k devReq, id string, err error) error {
	var f *submit.Failure
	if !errors.As(err, &f) {
		return nil
	}
	return s.answer(c, k, f.Code, id, f.Detail)
}

// HeaderIdempotencyKey names the header that makes retries of one reading
// safe: the same key for the same serial yields one stored reading.
const HeaderIdempotencyKey = "Idempotency-Key"

// keyNamespace derives event ids from (serial, Idempotency-Key).
var keyNamespace = uuid.MustParse("6f1c3a8e-2b7d-5e4f-9a10-d3e5c7b9a2f4")

// eventID is a new event's id: derived from (serial, key, suffix) when the
// request carries an Idempotency-Key (suffix tells a backlog's messages
// apart), else random.
func eventID(serial, key, suffix string) string {
	if key == "" {
		return uuid.NewString()
	}
	return KeyedEventID(serial, key+suffix)
}

// KeyedEventID is the event id of a reading sent with an Idempotency-Key:
// the same for every retry of it, and different for another device.
func KeyedEventID(serial, key string) string {
	return uuid.NewSHA1(keyNamespace, []byte(serial+"\x00"+key)).String()
}

// readingTime is a reading's time and the note on a time refused: the
// message's ts, else the device's timestamp input in data, else the receive
// time (see readtime).
func (s *Server) readingTime(receivedNs int64, ts, data []byte, tsInput string) (int64, string) {
	if ts == nil && tsInput == "" {
		return receivedNs, ""
	}
	sources := [2]readtime.Source{{Name: "ts", Value: ts}}
	if tsInput != "" {
		sources[1] = readtime.Source{Name: "data." + tsInput, Value: jsonobj.Value(data, tsInput)}
	}
	return s.Limits.ReadingTime.Resolve(time.Unix(0, receivedNs), sources[:]...)
}
