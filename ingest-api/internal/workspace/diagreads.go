package workspace

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
)

// Diagnostics ranges: the last hour, day or week before now.
var diagRanges = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

// diagRange reads ?range= (default 24h) as a query over the time before now.
func diagRange(c echo.Context, now time.Time) (query.Request, string, bool) {
	name := c.QueryParam("range")
	if name == "" {
		name = "24h"
	}
	d, ok := diagRanges[name]
	return query.Request{FromMs: now.Add(-d).UnixMilli(), ToMs: now.UnixMilli() + 1}, name, ok
}

// deviceDiagnostics: GET /devices/{serial}/diagnostics?range=1h|24h|7d.
// Keys the device sends that now match a connected input (the mapping was
// fixed since) are left out.
func (s *Server) deviceDiagnostics(c echo.Context) error {
	serial := c.Param("serial")
	dev, ok := s.cache.Lookup(serial)
	if !ok {
		return s.respond(c, outcome.DeviceNotFound, edge.Clip(serial), "", "")
	}
	req, name, ok := diagRange(c, time.Now())
	if !ok {
		return s.respond(c, outcome.BadRequest, "", "", "range must be 1h, 24h or 7d")
	}
	req.Serial = serial
	resp, code, err := s.ask(c.Request().Context(), query.Diagnostics, req)
	if err != nil || resp.Diagnostics == nil {
		return s.respond(c, failedRead(code, err), edge.Clip(serial), "", errText(err, "no diagnostics"))
	}
	d := *resp.Diagnostics
	keys := d.Keys[:0]
	for _, k := range d.Keys {
		if _, connected := dev.Route(k.Key); !connected {
			keys = append(keys, k)
		}
	}
	d.Keys = keys
	d.Counts, d.Rejections, d.Keys, d.ReadingTime.AtReceive = edge.OrEmpty(d.Counts), edge.OrEmpty(d.Rejections), edge.OrEmpty(d.Keys), edge.OrEmpty(d.ReadingTime.AtReceive)
	return c.JSON(http.StatusOK, struct {
		Serial string `json:"serial"`
		Range  string `json:"range"`
		From   string `json:"from"`
		To     string `json:"to"`
		query.DeviceDiagnostics
	}{serial, name, query.FormatNs(req.FromMs * 1e6), query.FormatNs(req.ToMs * 1e6), d})
}

// fleet: GET /fleet?range=1h|24h|7d: devices silent now, and over the
// range the devices with the most rejections and the serials not
// provisioned that posted (those provisioned since are left out).
func (s *Server) fleet(c echo.Context) error {
	req, name, ok := diagRange(c, time.Now())
	if !ok {
		return s.respond(c, outcome.BadRequest, "", "", "range must be 1h, 24h or 7d")
	}
	resp, code, err := s.ask(c.Request().Context(), query.Fleet, req)
	if err != nil || resp.Fleet == nil {
		return s.respond(c, failedRead(code, err), "", "", errText(err, "no fleet view"))
	}
	f := *resp.Fleet
	keep := func(list []query.FleetSerial, provisioned bool) []query.FleetSerial {
		out := list[:0]
		for _, d := range list {
			if _, ok := s.cache.Lookup(d.Serial); ok == provisioned {
				out = append(out, d)
			}
		}
		return edge.OrEmpty(out)
	}
	f.Silent, f.Unknown, f.MostRejected, f.Unnamed = keep(f.Silent, true), keep(f.Unknown, false), edge.OrEmpty(f.MostRejected), edge.OrEmpty(f.Unnamed)
	return c.JSON(http.StatusOK, struct {
		Range string `json:"range"`
		query.FleetView
	}{name, f})
}

// failedRead is the outcome of a read that failed (err) or answered
// nothing it should have.
func failedRead(code outcome.Code, err error) outcome.Code {
	if err == nil {
		return outcome.ProcessingFailed
	}
	return code
}

func errText(err error, none string) string {
	if err != nil {
		return err.Error()
	}
	return none
}
