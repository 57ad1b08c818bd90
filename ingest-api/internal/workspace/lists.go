package workspace

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Listing pages.
const (
	defaultPage = 50
	maxPage     = query.MaxSerials // a page's last-message times are one query
)

// deviceSummary is one device of the listing: the record without its token,
// and when its newest message was received (nil: never, or unknown when the
// listing says lastMessageError).
type deviceSummary struct {
	Serial         string           `json:"serial"`
	ConnectionType string           `json:"connectionType"`
	Inputs         []registry.Input `json:"inputs"`
	TimestampInput string           `json:"timestampInput,omitempty"`
	LastMessageAt  *string          `json:"lastMessageAt"`
}

// listDevices: GET /api/v1/admin/devices?prefix=&limit=&cursor=, in serial
// order. The cursor is opaque to clients (the last serial of the page).
func (s *Server) listDevices(c echo.Context) error {
	prefix, after, limit, err := pageParams(c)
	if err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	devs, more := s.cache.Devices(prefix, after, limit)
	out := make([]deviceSummary, len(devs))
	serials := make([]string, len(devs))
	for i, d := range devs {
		out[i] = deviceSummary{Serial: d.Serial, ConnectionType: d.ConnectionType, Inputs: edge.OrEmpty(d.Inputs), TimestampInput: d.TimestampInput}
		serials[i] = d.Serial
	}
	body := map[string]any{"devices": out}
	if more {
		body["nextCursor"] = cursor(devs[len(devs)-1].Serial)
	}
	// The times come from ClickHouse; without them the listing still
	// answers, and says why they are missing.
	if len(serials) > 0 {
		resp, _, err := s.ask(c.Request().Context(), query.LastSeen, query.Request{Serials: serials})
		if err != nil {
			body["lastMessageError"] = err.Error()
		}
		for i := range out {
			if t, ok := resp.LastSeen[out[i].Serial]; ok {
				out[i].LastMessageAt = &t
			}
		}
	}
	return c.JSON(http.StatusOK, body)
}

// entitySummary is one entity of the listing with its inputs.
type entitySummary struct {
	Entity string         `json:"entity"`
	Inputs []inputSummary `json:"inputs"`
}

type inputSummary struct {
	Input string          `json:"input"`
	Feeds []registry.Feed `json:"feeds"`
	// Latest is the input's latest value (nil: none stored, or unknown
	// when the listing says latestError).
	Latest *latestValue `json:"latest"`
}

type latestValue struct {
	Value  json.RawMessage `json:"value"`
	TS     string          `json:"ts"`
	Serial string          `json:"serial"`
	// ValueBytes is the size of a value left out (null) for its size.
	ValueBytes int `json:"valueBytes,omitempty"`
}

// listEntities: GET /api/v1/admin/entities?prefix=&limit=&cursor=, the
// entities the devices' inputs are connected to, in name order, each input
// with the device inputs feeding it and its latest value.
func (s *Server) listEntities(c echo.Context) error {
	prefix, after, limit, err := pageParams(c)
	if err != nil {
		return s.respond(c, outcome.BadRequest, "", "", err.Error())
	}
	all := s.cache.EntityInputs()
	var names []string
	for name := range all {
		if name > after && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	more := len(names) > limit
	if more {
		names = names[:limit]
	}
	out := make([]entitySummary, len(names))
	var pairs []query.EntityInput
	at := map[query.EntityInput]*inputSummary{}
	for i, name := range names {
		inputs := all[name]
		out[i] = entitySummary{Entity: name, Inputs: make([]inputSummary, 0, len(inputs))}
		for input, feeds := range inputs {
			slices.SortFunc(feeds, func(a, b registry.Feed) int {
				return cmp.Or(strings.Compare(a.Serial, b.Serial), strings.Compare(a.DeviceInput, b.DeviceInput))
			})
			out[i].Inputs = append(out[i].Inputs, inputSummary{Input: input, Feeds: feeds})
		}
		slices.SortFunc(out[i].Inputs, func(a, b inputSummary) int { return strings.Compare(a.Input, b.Input) })
		for j := range out[i].Inputs {
			p := query.EntityInput{Entity: name, Input: out[i].Inputs[j].Input}
			pairs = append(pairs, p)
			at[p] = &out[i].Inputs[j]
		}
	}
	body := map[string]any{"entities": out}
	if more {
		body["nextCursor"] = cursor(names[len(names)-1])
	}
	for len(pairs) > 0 {
		n := min(len(pairs), query.MaxPairs)
		resp, _, err := s.ask(c.Request().Context(), query.LatestOf, query.Request{Pairs: pairs[:n]})
		if err != nil {
			body["latestError"] = err.Error()
			break
		}
		for _, p := range resp.Points {
			if in := at[query.EntityInput{Entity: p.Entity, Input: p.Input}]; in != nil {
				in.Latest = &latestValue{Value: p.Value, TS: p.TS, Serial: p.Serial, ValueBytes: p.ValueBytes}
			}
		}
		pairs = pairs[n:]
	}
	return c.JSON(http.StatusOK, body)
}

// pageParams reads prefix, cursor and limit.
func pageParams(c echo.Context) (prefix, after string, limit int, err error) {
	q := c.QueryParams()
	if limit, err = parseLimit(q.Get("limit"), defaultPage, maxPage); err != nil {
		return "", "", 0, err
	}
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			return "", "", 0, fmt.Errorf("cursor is not one this API returned")
		}
		after = string(b)
	}
	return q.Get("prefix"), after, limit, nil
}

func cursor(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }
