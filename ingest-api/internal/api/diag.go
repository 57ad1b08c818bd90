package api

import (
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// devReq is a device request as the diagnostics count it (pkg/diag): its
// serial once read, whether that is provisioned, the readings it carries,
// the client address, the kind when the outcome alone does not tell
// (an MQTT-type device is answered as a wrong token), and whether it got
// past the device's token (only then is the device seen).
type devReq struct {
	serial        string
	known         bool
	authenticated bool
	readings      int
	source        netip.Addr
	kind          string
}

// answer responds to a device request and counts the answer.
func (s *Server) answer(c echo.Context, k devReq, code outcome.Code, eventID, detail string) error {
	err := s.respond(c, code, k.serial, eventID, detail)
	s.count(k, code, detail, k.readings)
	return err
}

// count adds an answer of code to the diagnostics: the request, with
// readings of its readings (a backlog counts its messages' own outcomes
// apart), and for a rejection its texts and source.
func (s *Server) count(k devReq, code outcome.Code, detail string, readings int) {
	if s.Tally == nil {
		return
	}
	a := diag.Answer{Serial: k.serial, Known: k.known, Authenticated: k.authenticated, Kind: k.kind, Requests: 1, Readings: readings, At: time.Now()}
	if a.Kind == "" {
		a.Kind = diag.KindOf(code)
	}
	if diag.Rejected(a.Kind) {
		_, body := edge.BodyFor(code, k.serial, detail)
		a.Message, a.Error = body.Message, body.Error
		if k.source.IsValid() {
			a.Source = k.source.String()
		}
	}
	s.Tally.Answer(a)
}

// countReadings adds a backlog's messages by their own outcomes.
func (s *Server) countReadings(k devReq, codes []outcome.Code) {
	if s.Tally == nil {
		return
	}
	n := make([]int, outcome.NumCodes())
	for _, code := range codes {
		if outcome.Valid(code) {
			n[code]++
		}
	}
	now := time.Now()
	for code, readings := range n {
		if readings > 0 {
			s.Tally.Answer(diag.Answer{Serial: k.serial, Known: k.known, Kind: diag.KindOf(outcome.Code(code)), Readings: readings, At: now})
		}
	}
}
