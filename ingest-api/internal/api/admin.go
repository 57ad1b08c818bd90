package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
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
		return s.respond(c, outcome.BadRequest, Clip(serial), "", err.Error())
	}
	var shown string
	var before *registry.View
	d, err := s.registry.Update(c.Request().Context(), serial, func(d *registry.Device, exists bool) error {
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
			tok, err := d.AddToken(s.keys, "", req.AccessToken, now)
			shown = tok
			return err
		case req.AccessToken != "":
			if set, err := d.SetToken(s.keys, req.AccessToken, now); err != nil || !set {
				return err
			}
			shown = req.AccessToken
		}
		return nil
	})
	if err != nil {
		return s.registryError(c, serial, err)
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

// registryError answers a failed registry change.
func (s *Server) registryError(c echo.Context, serial string, err error) error {
	switch {
	case errors.Is(err, registry.ErrInvalid):
		return s.respond(c, outcome.BadRequest, Clip(serial), "", err.Error())
	case errors.Is(err, registry.ErrConflict):
		return s.respond(c, outcome.Conflict, Clip(serial), "", err.Error())
	case errors.Is(err, registry.ErrNoToken):
		return s.respond(c, outcome.NotFound, Clip(serial), "", "the device has no token named "+Clip(c.Param("name")))
	case errors.Is(err, registry.ErrNotFound):
		return s.respond(c, outcome.DeviceNotFound, Clip(serial), "", "")
	}
	return s.respond(c, outcome.ProcessingFailed, Clip(serial), "", err.Error())
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
	return d, nil
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
	d, err := s.registry.Get(c.Request().Context(), serial)
	if err != nil {
		return s.registryError(c, serial, err)
	}
	return c.JSON(http.StatusOK, d.View())
}

func (s *Server) deleteDevice(c echo.Context) error {
	serial := c.Param("serial")
	d, err := s.registry.Delete(c.Request().Context(), serial)
	if err != nil {
		return s.registryError(c, serial, err)
	}
	s.record(c, "device.deleted", serial, d.View(), nil)
	s.limiter.Forget(serial)
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) deviceMessages(c echo.Context) error {
	req := query.Request{Serial: c.Param("serial")}
	var err error
	if req.Limit, err = parseLimit(c.QueryParam("limit")); err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	if b := c.QueryParam("before"); b != "" {
		if req.BeforeNs, err = strconv.ParseInt(b, 10, 64); err != nil || req.BeforeNs <= 0 {
			return s.respond(c, outcome.BadRequest, "", "", "before must be the next cursor of an earlier page")
		}
	}
	// The page goes out as the writer rendered it (up to ~4 MiB: decoding
	// and encoding it again would triple the cost of a read).
	var resp struct {
		Error    string          `json:"error"`
		Messages json.RawMessage `json:"messages"`
		NextNs   int64           `json:"nextNs"`
	}
	code, err := s.askInto(c.Request().Context(), query.Messages, req, &resp, &resp.Error)
	if err != nil {
		return s.respond(c, code, Clip(req.Serial), "", err.Error())
	}
	// A page holds at most limit messages and about 4 MiB of payloads;
	// next asks for the page after it.
	page := make([]byte, 0, len(resp.Messages)+64)
	page = append(page, `{"messages":`...)
	if len(resp.Messages) == 0 || string(resp.Messages) == "null" {
		page = append(page, "[]"...)
	} else {
		page = append(page, resp.Messages...)
	}
	if resp.NextNs > 0 {
		page = strconv.AppendInt(append(page, `,"next":"`...), resp.NextNs, 10)
		page = append(page, '"')
	}
	return c.JSONBlob(http.StatusOK, append(page, "}\n"...))
}

func (s *Server) latest(c echo.Context) error {
	req := query.Request{Entity: c.Param("entity"), Input: c.Param("input"), Limit: 1}
	resp, code, err := s.ask(c.Request().Context(), query.Latest, req)
	if err != nil {
		return s.respond(c, code, "", "", err.Error())
	}
	if len(resp.Points) == 0 {
		return s.respond(c, outcome.NotFound, "", "", fmt.Sprintf("no value stored for entity %s input %s", req.Entity, req.Input))
	}
	p := resp.Points[0]
	return c.JSON(http.StatusOK, map[string]any{
		"entity": req.Entity, "input": req.Input, "value": p.Value, "ts": p.TS, "receivedAt": p.ReceivedAt, "serial": p.Serial,
	})
}

func (s *Server) series(c echo.Context) error {
	q := c.QueryParams()
	req, err := seriesRequest(q.Get("limit"), q.Get("from"), q.Get("to"), time.Now())
	if err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	req.Entity, req.Input = c.Param("entity"), c.Param("input")
	if req.StepMs, err = seriesStep(q.Get("step"), q.Get("points"), req.FromMs, req.ToMs); err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	if req.StepMs > 0 {
		resp, code, err := s.ask(c.Request().Context(), query.Buckets, req)
		if err != nil {
			return s.respond(c, code, "", "", err.Error())
		}
		return c.JSON(http.StatusOK, struct {
			Step   string         `json:"step"`
			Points []query.Bucket `json:"points"`
		}{query.FormatStep(req.StepMs), orEmpty(resp.Buckets)})
	}
	resp, code, err := s.ask(c.Request().Context(), query.Series, req)
	if err != nil {
		return s.respond(c, code, "", "", err.Error())
	}
	pts := orEmpty(resp.Points)
	for i := range pts {
		pts[i].Serial = ""
	}
	return c.JSON(http.StatusOK, map[string]any{"points": pts})
}

// seriesStep reads the aggregation parameters: step (a duration) or points
// (the most buckets wanted), not both; 0 asks for raw points.
func seriesStep(step, points string, fromMs, toMs int64) (int64, error) {
	switch {
	case step != "" && points != "":
		return 0, errors.New("give step or points, not both")
	case step != "":
		ms, err := query.ParseStep(step)
		if err != nil {
			return 0, err
		}
		if query.BucketCount(fromMs, toMs, ms) > query.MaxBuckets {
			return 0, fmt.Errorf("step too small for the range (at most %d buckets)", query.MaxBuckets)
		}
		return ms, nil
	case points != "":
		n, err := strconv.Atoi(points)
		if err != nil || n < 1 || n > query.MaxBuckets {
			return 0, fmt.Errorf("points must be 1 to %d", query.MaxBuckets)
		}
		return query.StepFor(fromMs, toMs, n), nil
	}
	return 0, nil
}

// seriesRequest reads the series query parameters; the range defaults to the
// 24 hours before now.
func seriesRequest(limit, from, to string, now time.Time) (query.Request, error) {
	var req query.Request
	var err error
	if req.Limit, err = parseLimit(limit); err != nil {
		return req, err
	}
	end, start := now, now.Add(-24*time.Hour)
	if from != "" {
		if start, err = time.Parse(time.RFC3339Nano, from); err != nil {
			return req, errors.New("from must be an RFC 3339 time")
		}
	}
	if to != "" {
		if end, err = time.Parse(time.RFC3339Nano, to); err != nil {
			return req, errors.New("to must be an RFC 3339 time")
		}
	}
	if end.Before(start) {
		return req, errors.New("to is before from")
	}
	req.FromMs, req.ToMs = start.UnixMilli(), end.UnixMilli()
	return req, nil
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return query.DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > query.MaxLimit {
		return 0, fmt.Errorf("limit must be 1 to %d", query.MaxLimit)
	}
	return n, nil
}

// ask sends a read query to a writer-worker, the owner of ClickHouse.
func (s *Server) ask(ctx context.Context, kind string, req query.Request) (query.Response, outcome.Code, error) {
	var resp query.Response
	code, err := s.askInto(ctx, kind, req, &resp, &resp.Error)
	return resp, code, err
}

// askInto sends a read query and decodes the answer into out, whose
// Error field errText points at.
func (s *Server) askInto(ctx context.Context, kind string, req query.Request, out any, errText *string) (outcome.Code, error) {
	ctx, cancel := context.WithTimeout(ctx, s.limits.QueryTimeout)
	defer cancel()
	b, _ := json.Marshal(req)
	m, err := s.nc.RequestWithContext(ctx, s.names.QueryPrefix()+kind, b)
	if err != nil {
		return outcome.ProcessingFailed, fmt.Errorf("query storage: %w", err)
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return outcome.Internal, fmt.Errorf("query storage: %w", err)
	}
	if *errText != "" {
		return outcome.ProcessingFailed, errors.New(*errText)
	}
	return outcome.Stored, nil
}

func (s *Server) ping(ctx context.Context) error {
	_, _, err := s.ask(ctx, query.Ping, query.Request{})
	return err
}
