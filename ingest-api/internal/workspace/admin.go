package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// maxDeviceBody bounds a workspace device record.
const maxDeviceBody = 1 << 20

// putDevice creates or replaces a device's record. Its tokens are kept
// across a replace; a record that names an accessToken makes it the
// device's only token (at creation, or the immediate cut-over for a token
// that leaked; rotation with overlap uses the tokens routes). A token made
// or set here is in the answer, once.
func (s *Server) putDevice(c echo.Context) error {
	serial := c.Param("serial")
	req, err := decodeDevice(http.MaxBytesReader(c.Response(), c.Request().Body, maxDeviceBody), serial)
	if err != nil {
		return s.respond(c, outcome.BadRequest, edge.Clip(serial), "", err.Error())
	}
	var shown string
	var before *registry.View
	d, err := s.Registry.Update(c.Request().Context(), serial, func(d *registry.Device, exists bool) error {
		shown, before = "", nil
		if exists {
			v := d.View()
			before = &v
		}
		tokens, seq := d.Tokens, d.TokenSeq
		*d = req
		d.AccessToken, d.Tokens, d.TokenSeq = "", tokens, seq
		now := time.Now()
		switch {
		case !exists:
			tok, err := d.AddToken(s.Keys, "", req.AccessToken, now)
			shown = tok
			return err
		case req.AccessToken != "":
			if set, err := d.SetToken(s.Keys, req.AccessToken, now); err != nil || !set {
				return err
			}
			shown = req.AccessToken
		}
		return nil
	})
	if err != nil {
		return s.changeError(c, serial, err)
	}
	after := d.View()
	switch {
	case before == nil:
		s.record(c, "device.created", serial, nil, after)
	case shown != "":
		s.record(c, "token.replaced", serial, before, after)
	default:
		s.record(c, "device.updated", serial, before, after)
	}
	return c.JSON(http.StatusOK, shownView{View: after, AccessToken: shown})
}

// shownView is a device with the token a change made, shown this once.
type shownView struct {
	registry.View
	AccessToken string `json:"accessToken,omitempty"`
}

// changeError answers a failed change of the workspace (a device, its
// tokens, a key); serial names the device, if one.
func (s *Server) changeError(c echo.Context, serial string, err error) error {
	code, detail := outcome.ProcessingFailed, err.Error()
	switch {
	case errors.Is(err, registry.ErrInvalid), errors.Is(err, adminkeys.ErrInvalid):
		code = outcome.BadRequest
	case errors.Is(err, registry.ErrConflict), errors.Is(err, adminkeys.ErrConflict):
		code = outcome.Conflict
	case errors.Is(err, registry.ErrKey):
		code, detail = outcome.Conflict, "the token was sealed under another TOKEN_KEY: add a new token"
	case errors.Is(err, registry.ErrNoToken):
		code, detail = outcome.NotFound, "the device has no token named "+edge.Clip(c.Param("name"))
	case errors.Is(err, adminkeys.ErrNotFound):
		code, detail = outcome.NotFound, "no key named "+edge.Clip(c.Param("name"))
	case errors.Is(err, registry.ErrNotFound):
		code, detail = outcome.DeviceNotFound, ""
	}
	return s.respond(c, code, edge.Clip(serial), "", detail)
}

// decodeDevice reads the workspace record of the device at serial: one JSON
// object of known fields, validated and given its defaults.
func decodeDevice(body io.Reader, serial string) (registry.Device, error) {
	var d registry.Device
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("device must be a JSON object: %w", err)
	}
	if dec.More() {
		return d, errors.New("device must be one JSON object")
	}
	if d.Serial != "" && d.Serial != serial {
		return d, errors.New("serial in the body differs from the path")
	}
	if d.Tokens != nil || d.TokenSeq != 0 {
		return d, errors.New("tokens are changed through /devices/{serial}/tokens")
	}
	d.Serial = serial
	if err := d.Normalize(); err != nil {
		return d, err
	}
	if dotSegment(serial) {
		return d, errors.New(`serial may not be "." or "..": no URL can name it`)
	}
	for _, in := range d.Inputs {
		if dotSegment(in.Entity) || dotSegment(in.EntityInput) {
			return d, errors.New(`an entity or entity input may not be "." or "..": no URL can name it`)
		}
	}
	return d, checkNewToken(d.AccessToken)
}

// decodeStrict reads a small JSON object of known fields into v; an empty
// body leaves v as it is.
func decodeStrict(c echo.Context, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if dec.More() {
		return errors.New("one JSON object only")
	}
	return nil
}

func (s *Server) getDevice(c echo.Context) error {
	serial := c.Param("serial")
	d, err := s.Registry.Get(c.Request().Context(), serial)
	if err != nil {
		return s.changeError(c, serial, err)
	}
	return c.JSON(http.StatusOK, d.View())
}

func (s *Server) deleteDevice(c echo.Context) error {
	serial := c.Param("serial")
	d, err := s.Registry.Delete(c.Request().Context(), serial)
	if err != nil {
		return s.changeError(c, serial, err)
	}
	s.record(c, "device.deleted", serial, d.View(), nil)
	s.cancelBackfillsOf(c, serial)
	s.Limiter.Forget(serial)
	return c.NoContent(http.StatusNoContent)
}
