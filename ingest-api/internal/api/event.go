package api

import (
	"bytes"
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
	if !s.limiter.Allow(req.Serial) {
		return s.respond(c, outcome.RateLimited, req.Serial, "", "")
	}

	ev := event.Event{ID: uuid.NewString(), Serial: req.Serial, ReceivedNs: s.timestamp(), Rev: dev.Rev,
		Reply: s.waiter.Subject(), Payload: req.Payload}
	data := event.AppendEvent(make([]byte, 0, len(req.Payload)+128), &ev)
	// The event travels on inside an envelope beside its mapped values: it
	// must fit twice in one NATS message.
	if 2*len(data)+512 > int(s.nc.MaxPayload()) {
		return s.respond(c, outcome.PayloadTooLarge, "", "", "")
	}
	replies, cancel := s.waiter.Register(ev.ID)
	defer cancel()
	fut, err := s.js.PublishMsgAsync(&nats.Msg{Subject: bus.EventsSubject, Data: data}, jetstream.WithMsgID(ev.ID))
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "event not accepted: "+err.Error())
	}

	// The stream's ack is not awaited on its own: the outcome follows it,
	// and not waking for it saves a goroutine switch per request. A
	// refusal by the stream does wake us, at once.
	timer := time.NewTimer(s.limits.OutcomeTimeout)
	defer timer.Stop()
	ctx := c.Request().Context()
	select {
	case r := <-replies:
		return s.respond(c, r.Code, req.Serial, ev.ID, r.Detail)
	case err := <-fut.Err():
		return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "event not accepted: "+err.Error())
	case <-timer.C:
		return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "timed out waiting for the storage outcome")
	case <-ctx.Done():
		// The client is gone; nobody reads an answer.
		return nil
	}
}
