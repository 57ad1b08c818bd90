package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
)

// The workspace API's reads of stored data, answered by writer-worker.

func (s *Server) deviceMessages(c echo.Context) error {
	req := query.Request{Serial: c.Param("serial")}
	var err error
	if req.Limit, err = parseLimit(c.QueryParam("limit"), query.DefaultLimit, query.MaxLimit); err != nil {
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
	code, err := s.Query.Ask(c.Request().Context(), query.Messages, req, &resp, &resp.Error)
	if err != nil {
		return s.respond(c, code, edge.Clip(req.Serial), "", err.Error())
	}
	// A page holds at most limit messages and about 4 MiB of payloads;
	// next asks for the page after it.
	// The writer does not escape HTML on the wire (it would make a page of
	// '<' six times its size); the answer escapes it as every JSON answer.
	var page bytes.Buffer
	page.Grow(len(resp.Messages) + 64)
	page.WriteString(`{"messages":`)
	if len(resp.Messages) == 0 || string(resp.Messages) == "null" {
		page.WriteString("[]")
	} else {
		json.HTMLEscape(&page, resp.Messages)
	}
	if resp.NextNs > 0 {
		page.WriteString(`,"next":"` + strconv.FormatInt(resp.NextNs, 10) + `"`)
	}
	page.WriteString("}\n")
	return c.JSONBlob(http.StatusOK, page.Bytes())
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
	body := map[string]any{
		"entity": req.Entity, "input": req.Input, "value": p.Value, "ts": p.TS, "receivedAt": p.ReceivedAt, "serial": p.Serial,
	}
	if p.ValueBytes > 0 {
		body["valueBytes"], body["truncated"] = p.ValueBytes, true
	}
	return c.JSON(http.StatusOK, body)
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
			Step      string         `json:"step"`
			Points    []query.Bucket `json:"points"`
			Truncated bool           `json:"truncated,omitempty"`
		}{query.FormatStep(req.StepMs), edge.OrEmpty(resp.Buckets), resp.Truncated})
	}
	resp, code, err := s.ask(c.Request().Context(), query.Series, req)
	if err != nil {
		return s.respond(c, code, "", "", err.Error())
	}
	pts := edge.OrEmpty(resp.Points)
	for i := range pts {
		pts[i].Serial = ""
	}
	body := map[string]any{"points": pts}
	if resp.Truncated {
		body["truncated"] = true
	}
	if resp.NextMs > 0 { // the from of the page after
		body["next"] = query.FormatNs(resp.NextMs * 1e6)
	}
	return c.JSON(http.StatusOK, body)
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
	if req.Limit, err = parseLimit(limit, query.DefaultLimit, query.MaxLimit); err != nil {
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

// parseLimit reads a limit parameter: 1 to max, def when absent.
func parseLimit(v string, def, max int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, fmt.Errorf("limit must be 1 to %d", max)
	}
	return n, nil
}

// ask sends a read query to a writer-worker, the owner of ClickHouse.
func (s *Server) ask(ctx context.Context, kind string, req query.Request) (query.Response, outcome.Code, error) {
	var resp query.Response
	code, err := s.Query.Ask(ctx, kind, req, &resp, &resp.Error)
	return resp, code, err
}
