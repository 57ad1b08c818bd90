package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// checkFunc reads a device request's body as one endpoint does, up to the
// registry checks: the serial, the body's token, the readings it holds,
// and the outcome (Stored: well-formed) with its detail.
type checkFunc func(body []byte, headerToken string) (serial, bodyToken string, readings int, code outcome.Code, detail string)

// ingest is the front of both device endpoints, cheapest check first: the
// client address's standing (refused after too many failed
// authentications, decompression bombs or stalled bodies), the body within its size, pace and memory bounds, the
// endpoint's own checks in the spec's order, the device and its token
// (field clients send a user JWT in the header and the device token in the
// body: either one being the device's token authenticates), the device's
// rate in readings, and only then a slot of the pipeline (MAX_IN_FLIGHT):
// a slow body never holds one. handle runs once all pass, while the body
// is still held.
func (s *Server) ingest(c echo.Context, check checkFunc, handle func(authorized) error) error {
	k := devReq{source: s.Proxies.Client(c.Request())} // the peer, or the client a trusted proxy names
	if wait, refused := s.Failures.Refused(k.source); refused {
		s.refuseSource(c, wait)
		return s.answer(c, k, outcome.SourceRefused, "", "")
	}
	b, code, serial, err := s.readBody(c.Response(), c.Request())
	if errors.Is(err, errBomb) || errors.Is(err, errSlowBody) {
		// Bodies no honest client sends count as failures of the
		// address, as wrong tokens do.
		s.Failures.Fail(k.source)
	}
	if err != nil {
		if serial != "" { // too large: counted under the serial it names
			_, k.known = s.cache.Lookup(serial)
			k.serial = serial
		}
		// A body that stopped arriving is not waited for again.
		if code == outcome.BodyTimeout || !discardRest(c.Request(), s.Limits.DiscardBytes) {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		return s.answer(c, k, code, "", err.Error())
	}
	defer b.release()
	headerToken := edge.Bearer(c.Request().Header.Get(echo.HeaderAuthorization))
	var bodyToken, detail string
	k.serial, bodyToken, k.readings, code, detail = check(b.b, headerToken)
	b.endWork()
	dev, ok := s.cache.Lookup(k.serial)
	k.known = ok
	if code != outcome.Stored {
		return s.answer(c, k, code, "", detail)
	}
	if !ok {
		return s.authFailed(c, k, outcome.DeviceNotFound)
	}
	token, ok := dev.Authenticate(s.Keys, headerToken, bodyToken)
	if !ok && dev.Unreadable(s.Keys) {
		// Its token may be one this copy cannot check (TOKEN_KEY being
		// rotated): not the device's failure, nor its address's.
		return s.answer(c, k, outcome.ProcessingFailed, "", tokenUncheckable)
	}
	if !ok || !dev.AcceptsAPI() {
		if ok {
			k.kind = diag.KindMQTT
		}
		return s.authFailed(c, k, outcome.InvalidToken)
	}
	k.authenticated = true
	if ok, wait := s.Limiter.AllowN(k.serial, cost(k.readings, len(b.b))); !ok {
		edge.RetryAfter(c, wait)
		return s.answer(c, k, outcome.RateLimited, "", "")
	}
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return s.answer(c, k, outcome.Overloaded, "", "too many requests in flight, retry later")
	}
	return handle(authorized{devReq: k, dev: dev, token: token, secrets: []string{headerToken, bodyToken}})
}

// tokenUncheckable is the detail of a device request whose token this
// copy cannot check.
const tokenUncheckable = "The access token cannot be checked on this server yet, retry later"

// Paths of the device endpoints.
const (
	EventPath  = "/api/v1/deviceapi/event"
	EventsPath = "/api/v1/deviceapi/events"
)

// deviceSlash, run before routing, serves a device endpoint's path with a
// trailing slash as the path itself: firmware that joins a base URL and a
// path, or a library that adds the slash, reaches the endpoint it meant
// instead of a 404 it cannot act on.
func deviceSlash(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := c.Request(); r.URL.Path == EventPath+"/" || r.URL.Path == EventsPath+"/" {
			r.URL.Path, r.URL.RawPath = r.URL.Path[:len(r.URL.Path)-1], ""
		}
		return next(c)
	}
}

// authFailed answers a failed authentication with code, or, when it is
// past its address's limit (it got by the door while others used the limit
// up), as the refusal it would have met.
func (s *Server) authFailed(c echo.Context, k devReq, code outcome.Code) error {
	if wait, over := s.pastLimit(k.source); over {
		edge.RetryAfter(c, wait)
		k.kind = ""
		return s.answer(c, k, outcome.SourceRefused, "", "")
	}
	return s.answer(c, k, code, "", "")
}

// pastLimit notes a failed authentication from src and reports whether it
// is past the address's limit, and for how long the address is refused:
// the caller answers it as SourceRefused.
func (s *Server) pastLimit(src netip.Addr) (time.Duration, bool) {
	if _, over := s.Failures.Fail(src); over {
		return s.Failures.Refused(src)
	}
	return 0, false
}

// authorized is a device request that passed the front door: its device,
// the name of the device token it used (kept with each message), and the
// secrets it carried, which are removed from whatever is kept of it
// (internal/redact).
type authorized struct {
	devReq
	dev     *registry.Entry
	token   string
	secrets []string
}

// readingBytes is the size one token of a device's rate pays for: a
// request costs its readings, or one token per started readingBytes of
// body if that is more, so that a device's bytes are bounded too (1.6 MB/s
// at DEVICE_RATE 100) and one device posting large bodies cannot fill the
// events stream for the others.
const readingBytes = 16 << 10

func cost(readings, bodyBytes int) int {
	return max(readings, (bodyBytes+readingBytes-1)/readingBytes)
}

// refuseDiscard is the most of a refused address's body that is read and
// dropped: enough for a small body written before the client reads, and
// no more (an address refused is not owed the bandwidth).
const refuseDiscard = 64 << 10

// refuseSource readies the answer to a client address that failed too
// often, before its body is read: its first refuseDiscard bytes are read
// and dropped, for at most bodyGrace, so that a client writing before it
// reads still gets the answer; with a larger body, or one that stops
// arriving, the connection is closed after it. The caller answers
// SourceRefused. A refused address is never answered sooner than its
// bytes arrive: answered at once, an attacker stalling 1 MiB bodies came
// back on each connection as fast as it reconnected (11,000 refusals in
// 10 s from 1,000 connections, against 3,000 for stalled gzip bodies, whose
// 64 KiB were waited for), and its handshakes took the fleet's CPU.
func (s *Server) refuseSource(c echo.Context, wait time.Duration) {
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(bodyGrace))
	if !discardRest(c.Request(), refuseDiscard) {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
	edge.RetryAfter(c, wait)
}

// sniffBytes is how much of a body too large to read whole is looked at
// for its serial.
const sniffBytes = 4 << 10

// serialIn returns the top-level "serial" string of a JSON object's first
// sniffBytes: head, the part of the body already read, or when nothing
// was read (its Content-Length was over the limit) what rest holds first.
// The diagnostics count a body too large under the serial it names.
func serialIn(head []byte, rest io.Reader) string {
	if len(head) == 0 {
		buf := make([]byte, sniffBytes)
		n, _ := io.ReadFull(rest, buf)
		head = buf[:n]
	}
	d := json.NewDecoder(bytes.NewReader(head[:min(len(head), sniffBytes)]))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for {
		key, err := d.Token()
		if err != nil {
			return ""
		}
		if key == "serial" {
			v, _ := d.Token()
			serial, _ := v.(string)
			return serial
		}
		for depth := 0; ; { // skip the member's value
			t, err := d.Token()
			if err != nil {
				return ""
			}
			switch t {
			case json.Delim('{'), json.Delim('['):
				depth++
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
			if depth == 0 {
				break
			}
		}
	}
}
