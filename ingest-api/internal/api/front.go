package api

import (
	"bytes"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// checkFunc reads a device request's body as one endpoint does, up to the
// registry checks: the serial, the body's token, and the outcome (Stored:
// well-formed) with its detail.
type checkFunc func(body []byte, headerToken string) (serial, bodyToken string, code outcome.Code, detail string)

// ingest is the front of both device endpoints, in the spec's order: the
// in-flight bound, the body and its size, the endpoint's own checks, the
// device and its token (field clients send a user JWT in the header and the
// device token in the body: either one being the device's token
// authenticates), then the per-device rate limit, which counts requests.
// handle runs once all pass, while the body is still held.
func (s *Server) ingest(c echo.Context, check checkFunc, handle func(dev *registry.Entry) error) error {
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return s.respond(c, outcome.Overloaded, "", "", "too many requests in flight, retry later")
	}
	buf := s.bufs.Get().(*bytes.Buffer)
	defer s.bufs.Put(buf)
	buf.Reset()
	if code, err := readBody(c.Request(), s.limits.MaxBodyBytes, buf); err != nil {
		if !discardRest(c.Request(), s.limits.DiscardBytes) {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		return s.respond(c, code, "", "", "")
	}
	headerToken := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
	serial, bodyToken, code, detail := check(buf.Bytes(), headerToken)
	if code != outcome.Stored {
		return s.respond(c, code, serial, "", detail)
	}
	dev, ok := s.cache.Lookup(serial)
	if !ok {
		return s.respond(c, outcome.DeviceNotFound, serial, "", "")
	}
	if !dev.AcceptsAPI() || !(dev.TokenMatches(headerToken) || dev.TokenMatches(bodyToken)) {
		return s.respond(c, outcome.InvalidToken, serial, "", "")
	}
	if !s.limiter.Allow(serial) {
		return s.respond(c, outcome.RateLimited, serial, "", "")
	}
	return handle(dev)
}
