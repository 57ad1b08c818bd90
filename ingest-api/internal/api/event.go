package api

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// postEvent is POST /api/v1/deviceapi/event: validate, authenticate against
// the in-memory registry, publish to JetStream, and wait for the outcome a
// worker sends back.
func (s *Server) postEvent(c echo.Context) error {
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return s.respond(c, outcome.Overloaded, "", "", "too many requests in flight, retry later")
	}

	buf := s.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	defer s.bufs.Put(buf)
	if code, err := readBody(c.Request(), s.limits.MaxBodyBytes, buf); err != nil {
		return s.respond(c, code, "", "", "")
	}

	headerToken := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
	req, code := parse(buf.Bytes(), headerToken)
	if code != outcome.Stored {
		return s.respond(c, code, req.Serial, "", "")
	}
	dev, ok := s.cache.Lookup(req.Serial)
	if !ok {
		return s.respond(c, outcome.DeviceNotFound, req.Serial, "", "")
	}
	// Field clients send a user JWT in the header and the device token in
	// the body: either one being the device's token authenticates.
	if !dev.AcceptsAPI() || !(dev.TokenMatches(headerToken) || dev.TokenMatches(req.BodyToken)) {
		return s.respond(c, outcome.InvalidToken, req.Serial, "", "")
	}

	ev := event.Event{ID: uuid.NewString(), Serial: req.Serial, ReceivedNs: s.timestamp(), Rev: dev.Rev, Payload: req.Payload}
	data, err := json.Marshal(ev)
	if err != nil {
		return s.respond(c, outcome.Internal, req.Serial, ev.ID, "encode event: "+err.Error())
	}
	subject, replies, cancel := s.waiter.Register(ev.ID)
	defer cancel()
	msg := &nats.Msg{Subject: bus.EventsSubject, Data: data, Header: nats.Header{event.HeaderReply: []string{subject}}}
	fut, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(ev.ID))
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "event not accepted: "+err.Error())
	}

	timer := time.NewTimer(s.limits.OutcomeTimeout)
	defer timer.Stop()
	acked := fut.Ok()
	ctx := c.Request().Context()
	for {
		select {
		case r := <-replies:
			return s.respond(c, r.Code, req.Serial, ev.ID, r.Detail)
		case <-acked:
			acked = nil // stored in the stream; keep waiting for the outcome
		case err := <-fut.Err():
			return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "event not accepted: "+err.Error())
		case <-timer.C:
			return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "timed out waiting for the storage outcome")
		case <-ctx.Done():
			// The client is gone; nobody reads an answer.
			return nil
		}
	}
}
