package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/devicehub/eventservice/pkg/jsonobj"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// request is an ingestion request after the checks that need no registry.
type request struct {
	Serial    string
	BodyToken string
	Payload   []byte // the body without accessToken
	TS        []byte // the top-level ts as sent (nil: absent)
	Data      []byte // the data object as sent
}

// parse checks body in the spec's order of precedence up to the data check
// (format, serial, token, data); the registry checks follow in the handler.
// headerToken is the Bearer token, if any. The body is validated once and
// its top-level members are sliced out of it, without a map; as with a map,
// the last of repeated names counts.
func parse(body []byte, headerToken string) (_ request, code outcome.Code) {
	if !json.Valid(body) {
		return request{}, outcome.InvalidFormat
	}
	var buf [8]jsonobj.Member
	ms, ok := jsonobj.Members(body, buf[:0])
	if !ok {
		return request{}, outcome.InvalidFormat
	}
	var serial, token, data, ts []byte
	for _, m := range ms {
		switch m.Name {
		case "serial":
			serial = m.Value
		case "accessToken":
			token = m.Value
		case "data":
			data = m.Value
		case "ts":
			ts = m.Value
		}
	}
	var r request
	if r.Serial, r.BodyToken, code = identity(serial, token, headerToken); code != outcome.Stored {
		return request{}, code
	}
	if len(data) == 0 || data[0] != '{' {
		return request{}, outcome.InvalidData
	}
	r.TS, r.Data = ts, data
	var out bytes.Buffer
	out.Grow(len(body))
	out.WriteByte('{')
	writeMembers(&out, ms, "accessToken")
	out.WriteByte('}')
	r.Payload = out.Bytes()
	return r, outcome.Stored
}

// writeMembers writes the members of ms not named in skip to out, as they
// were sent but compacted, each after a comma unless out ends with the
// object's opening brace.
func writeMembers(out *bytes.Buffer, ms []jsonobj.Member, skip ...string) {
	for _, m := range ms {
		if slices.Contains(skip, m.Name) {
			continue
		}
		if b := out.Bytes(); b[len(b)-1] != '{' {
			out.WriteByte(',')
		}
		out.Write(m.RawName)
		out.WriteByte(':')
		_ = json.Compact(out, m.Value) // valid: cannot fail
	}
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

// identity checks the serial and token members of a body (both endpoints,
// in the spec's order): a non-empty string serial, then a token in the
// header or the body (a non-string body token counts as absent).
func identity(serial, token []byte, headerToken string) (string, string, outcome.Code) {
	s, ok := jsonobj.String(serial)
	if !ok || s == "" {
		return "", "", outcome.MissingSerial
	}
	bodyToken, _ := jsonobj.String(token)
	if headerToken == "" && bodyToken == "" {
		return "", "", outcome.MissingToken
	}
	return s, bodyToken, outcome.Stored
}
