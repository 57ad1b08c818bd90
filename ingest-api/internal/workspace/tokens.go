package workspace

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Device token rotation with overlap (docs/workspace-api.md): a device holds
// a primary and a secondary token, both authenticate; an operator adds the
// new one, the fleet's firmware moves to it, the operator promotes it and
// retires the old one. Every change is a compare-and-set on the record, so
// two consoles acting at once both take effect or one is told why not.

// namedToken is the body of POST .../tokens (both optional), and a token
// shown once: at creation, or when revealed.
type namedToken struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// minToken is the shortest device token an operator may set (generated
// ones are 32 hex digits): a guesser has 20 tries a minute per address.
// Tokens set before there was a minimum keep working.
const minToken = 16

// checkNewToken refuses a token an operator names that is too short to
// keep guessers out; an empty one is generated.
func checkNewToken(tok string) error {
	if tok != "" && len(tok) < minToken {
		return fmt.Errorf("a token must be at least %d bytes (leave it out to have one generated)", minToken)
	}
	return nil
}

// addToken: POST /devices/{serial}/tokens gives the device a secondary
// token (generated unless the body names one) and answers it, once.
func (s *Server) addToken(c echo.Context) error {
	var req namedToken
	if err := decodeStrict(c, &req); err != nil {
		return s.respond(c, outcome.BadRequest, edge.Clip(c.Param("serial")), "", "token must be a JSON object {name, token}, both optional: "+err.Error())
	}
	if dotSegment(req.Name) {
		return s.respond(c, outcome.BadRequest, edge.Clip(c.Param("serial")), "", `a token's name may not be "." or "..": no URL can name it`)
	}
	if err := checkNewToken(req.Token); err != nil {
		return s.respond(c, outcome.BadRequest, edge.Clip(c.Param("serial")), "", err.Error())
	}
	var shown namedToken
	return s.changeDevice(c, "token.added", func(d *registry.Device) error {
		tok, err := d.AddToken(s.Keys, req.Name, req.Token, time.Now())
		if err == nil {
			shown = namedToken{Name: d.Tokens[len(d.Tokens)-1].Name, Token: tok}
		}
		return err
	}, func(registry.View) error { return c.JSON(http.StatusCreated, shown) })
}

// promoteToken: POST /devices/{serial}/tokens/{name}/promote makes the
// token the primary.
func (s *Server) promoteToken(c echo.Context) error {
	return s.changeTokens(c, "token.promoted", (*registry.Device).Promote)
}

// retireToken: DELETE /devices/{serial}/tokens/{name}; from then on the
// token is refused ("Invalid access token").
func (s *Server) retireToken(c echo.Context) error {
	return s.changeTokens(c, "token.retired", (*registry.Device).Retire)
}

func (s *Server) changeTokens(c echo.Context, action string, change func(*registry.Device, string) error) error {
	return s.changeDevice(c, action, func(d *registry.Device) error { return change(d, c.Param("name")) },
		func(after registry.View) error { return c.JSON(http.StatusOK, after) })
}

// changeDevice makes change to the existing device at the path's serial,
// records it as action, and answers with answer.
func (s *Server) changeDevice(c echo.Context, action string, change func(*registry.Device) error, answer func(after registry.View) error) error {
	serial := c.Param("serial")
	var before registry.View
	d, err := s.Registry.Update(c.Request().Context(), serial, func(d *registry.Device, exists bool) error {
		if !exists {
			return registry.ErrNotFound
		}
		before = d.View()
		return change(d)
	})
	if err != nil {
		return s.changeError(c, serial, err)
	}
	after := d.View()
	s.record(c, action, serial, before, after)
	return answer(after)
}

// revealToken: POST /devices/{serial}/tokens/{name}/reveal shows a token
// (the device overview's "Reveal"). A POST, so that no cache or log of
// URLs keeps the answer and the audit trail records who asked.
func (s *Server) revealToken(c echo.Context) error {
	serial, name := c.Param("serial"), c.Param("name")
	d, err := s.Registry.Get(c.Request().Context(), serial)
	if err != nil {
		return s.changeError(c, serial, err)
	}
	tok, err := d.Reveal(s.Keys, name)
	if err != nil {
		return s.changeError(c, serial, err)
	}
	s.record(c, "token.revealed", serial, nil, map[string]string{"name": name})
	return c.JSON(http.StatusOK, namedToken{Name: name, Token: tok})
}
