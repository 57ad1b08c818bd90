package api

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// request is an ingestion request after the checks that need no registry.
type request struct {
	Serial    string
	BodyToken string
	Payload   []byte // the body without accessToken
}

// parse checks body in the spec's order of precedence up to the data check
// (format, serial, token, data); the registry checks follow in the handler.
// headerToken is the Bearer token, if any.
func parse(body []byte, headerToken string) (request, outcome.Code) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		// A non-object (array, string, null) fails to decode into a map
		// too, except null, which leaves the map nil.
		return request{}, outcome.InvalidFormat
	}
	var r request
	if raw, ok := fields["serial"]; !ok || json.Unmarshal(raw, &r.Serial) != nil || r.Serial == "" {
		return request{}, outcome.MissingSerial
	}
	if raw, ok := fields["accessToken"]; ok {
		_ = json.Unmarshal(raw, &r.BodyToken) // a non-string token counts as absent
	}
	if headerToken == "" && r.BodyToken == "" {
		return request{}, outcome.MissingToken
	}
	data, ok := fields["data"]
	if !ok || len(data) == 0 || data[0] != '{' {
		return request{}, outcome.InvalidData
	}
	if _, has := fields["accessToken"]; has {
		delete(fields, "accessToken")
		b, err := json.Marshal(fields)
		if err != nil {
			return request{}, outcome.InvalidFormat
		}
		r.Payload = b
	} else {
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			return request{}, outcome.InvalidFormat
		}
		r.Payload = buf.Bytes()
	}
	return r, outcome.Stored
}

// bearer returns the token of an "Authorization: Bearer <token>" header; the
// scheme is case-insensitive. Any other scheme yields no token.
func bearer(h string) string {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(h[len(scheme):])
}
