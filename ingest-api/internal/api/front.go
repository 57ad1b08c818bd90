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

// ingest is the front of both device endpoints: admit runs the checks,
// and the request is answered once, either with its refusal or by handle,
// which runs while the body and the pipeline slot are still held.
func (s *Server) ingest(c echo.Context, check checkFunc, handle func(authorized) error) error {
	var h held
	defer h.release() // also when a check panics (middleware.Recover answers)
	a, no := s.admit(c, check, &h)
	if no != nil {
		if no.wait > 0 {
			edge.RetryAfter(c, no.wait)
		}
		if no.close {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		return s.answer(c, a.devReq, no.code, "", no.detail)
	}
	return handle(a)
}

// held is what a device request holds until it is answered: its body
// (memory budget, work slot) and its pipeline slot.
type held struct {
	body     *body
	inflight chan struct{}
}

func (h *held) release() {
	if h.inflight != nil {
		<-h.inflight
	}
	if h.body != nil {
		h.body.release()
	}
}

// refusal is the answer to a device request that did not pass the front
// door: its outcome and detail, the Retry-After it carries (0: none), and
// whether the connection is closed after it (the rest of the body was not
// read).
type refusal struct {
	code   outcome.Code
	detail string
	wait   time.Duration
	close  bool
}

// admit runs a device request through the front door's checks, cheapest
// first, each paid for only by requests that passed the ones before: the
// client address's standing (refused after too many failed
// authentications, decompression bombs or stalled bodies: no body read, no
// parse, no lookup), the body within its size, pace and memory bounds, the
// endpoint's own checks in the spec's order, the device and its token
// (field clients send a user JWT in the header and the device token in the
// body: either one being the device's token authenticates), the device's
// rate in readings, and only then a slot of the pipeline (MAX_IN_FLIGHT):
// a slow body never holds one. It returns the request as far as it was
// read and the refusal, if any; what the request holds is noted in h as
// soon as it is taken, for the caller to give back once it answered.
func (s *Server) admit(c echo.Context, check checkFunc, h *held) (a authorized, no *refusal) {
	r := c.Request()
	a.source = s.Proxies.Client(r) // the peer, or the client a trusted proxy names
	if wait, refused := s.Failures.Refused(a.source); refused {
		return a, s.refuseSource(c, wait)
	}
	b, code, serial, err := s.readBody(c.Response(), r)
	if err != nil {
		return a, s.badBody(c, &a.devReq, code, serial, err)
	}
	h.body = b
	headerToken := edge.Bearer(r.Header.Get(echo.HeaderAuthorization))
	var bodyToken, detail string
	a.serial, bodyToken, a.readings, code, detail = check(b.b, headerToken)
	b.endWork()
	dev, known := s.cache.Lookup(a.serial)
	a.known = known
	switch {
	case code != outcome.Stored:
		return a, &refusal{code: code, detail: detail}
	case !known:
		return a, s.authFailed(&a.devReq, outcome.DeviceNotFound)
	}
	token, ok := dev.Authenticate(s.Keys, headerToken, bodyToken)
	switch {
	case !ok && dev.Unreadable(s.Keys):
		// Its token may be one this copy cannot check (TOKEN_KEY being
		// rotated): not the device's failure, nor its address's.
		return a, &refusal{code: outcome.ProcessingFailed, detail: tokenUncheckable}
	case ok && !dev.AcceptsAPI():
		a.kind = diag.KindMQTT
		fallthrough
	case !ok:
		return a, s.authFailed(&a.devReq, outcome.InvalidToken)
	}
	a.authenticated = true
	if ok, wait := s.Limiter.AllowN(a.serial, cost(a.readings, len(b.b))); !ok {
		return a, &refusal{code: outcome.RateLimited, wait: wait}
	}
	select {
	case s.inflight <- struct{}{}:
		h.inflight = s.inflight
	default:
		return a, &refusal{code: outcome.Overloaded, detail: "too many requests in flight, retry later"}
	}
	a.dev, a.token, a.secrets = dev, token, []string{headerToken, bodyToken}
	return a, nil
}

// badBody is the refusal of a body that could not be read within its
// bounds (code and err say why). Bodies no honest client sends count as
// failures of the address, as wrong tokens do; one too large is counted
// under the serial its first bytes name; after a body that stopped
// arriving, or whose rest is too large to drop, the connection is closed.
func (s *Server) badBody(c echo.Context, k *devReq, code outcome.Code, serial string, err error) *refusal {
	if errors.Is(err, errBomb) || errors.Is(err, errSlowBody) {
		s.Failures.Fail(k.source)
	}
	if serial != "" {
		_, k.known = s.cache.Lookup(serial)
		k.serial = serial
	}
	// A body that stopped arriving is not waited for again.
	closeConn := code == outcome.BodyTimeout || !discardRest(c.Request(), s.Limits.DiscardBytes)
	return &refusal{code: code, detail: err.Error(), close: closeConn}
}

// tokenUncheckable is the detail of a device request whose token this
// copy cannot check.
const tokenUncheckable = "The access token cannot be checked on this server yet, retry later"

// Paths of the device endpoints.
const (
	EventPath  = "/api/v1/deviceapi/event"
	EventsPath = "/api/v1/deviceapi/events"
)

// routeDevice routes a device endpoint at path and, as the same endpoint,
// at path with a trailing slash: firmware that joins a base URL and a
// path, or a library that adds the slash, reaches the endpoint it meant
// instead of a 404 it cannot act on. Both are counted under path. A route
// of its own, not a rewrite before routing: Echo runs Pre middleware by
// building its chain again for every request.
func routeDevice(e *echo.Echo, path string, h echo.HandlerFunc) {
	e.POST(path, h)
	e.POST(path+"/", func(c echo.Context) error {
		c.SetPath(path)
		return h(c)
	})
}

// authFailed is the refusal of a failed authentication: code, or, when
// it is past its address's limit (it got by the door while others used
// the limit up), the refusal it would have met at the door.
func (s *Server) authFailed(k *devReq, code outcome.Code) *refusal {
	if wait, over := s.pastLimit(k.source); over {
		k.kind = ""
		return &refusal{code: outcome.SourceRefused, wait: max(wait, time.Second)}
	}
	return &refusal{code: code}
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

// refuseSource is the refusal of a client address that failed too often,
// before its body is read: its first refuseDiscard bytes are read and
// dropped, for at most bodyGrace, so that a client writing before it
// reads still gets the answer; with a larger body, or one that stops
// arriving, the connection is closed after it. A refused address is never
// answered sooner than its bytes arrive: answered at once, an attacker
// stalling 1 MiB bodies came back on each connection as fast as it
// reconnected (11,000 refusals in 10 s from 1,000 connections, against
// 3,000 for stalled gzip bodies, whose 64 KiB were waited for), and its
// handshakes took the fleet's CPU.
func (s *Server) refuseSource(c echo.Context, wait time.Duration) *refusal {
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(bodyGrace))
	return &refusal{code: outcome.SourceRefused, wait: wait, close: !discardRest(c.Request(), refuseDiscard)}
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
