package api

import (
	"bytes"
	"encoding/json"
	"slices"

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
// headerToken is the Bearer token, if any.
func parse(body []byte, headerToken string) (request, outcome.Code) {
	var buf [8]jsonobj.Member
	ms, serial, bodyToken, code := head(body, buf[:0], headerToken)
	if code != outcome.Stored {
		return request{Serial: serial}, code
	}
	data := member(ms, "data")
	if !validData(data) {
		return request{Serial: serial}, outcome.InvalidData
	}
	var out bytes.Buffer
	out.Grow(len(body))
	out.WriteByte('{')
	writeMembers(&out, ms, "accessToken")
	out.WriteByte('}')
	return request{Serial: serial, BodyToken: bodyToken, Payload: out.Bytes(), TS: member(ms, "ts"), Data: data}, outcome.Stored
}

// head reads the members of a device request's body and checks what both
// endpoints check first, in the spec's order: the format (one JSON
// object, after a UTF-8 byte order mark if one leads, that names none of
// the members read twice), a non-empty string serial, then a token in the
// header or the body (a non-string body token counts as absent). The body
// is validated once and its top-level members are sliced out of it,
// without a map. The serial is returned once read, also when the token is
// missing.
func head(body []byte, buf []jsonobj.Member, headerToken string) (ms []jsonobj.Member, serial, bodyToken string, _ outcome.Code) {
	body = bytes.TrimPrefix(body, byteOrderMark)
	if !json.Valid(body) {
		return nil, "", "", outcome.InvalidFormat
	}
	ms, ok := jsonobj.Members(body, buf)
	if !ok || jsonobj.Repeats(ms, readMembers...) {
		return nil, "", "", outcome.InvalidFormat
	}
	if serial, ok = jsonobj.String(member(ms, "serial")); !ok || serial == "" {
		return nil, "", "", outcome.MissingSerial
	}
	if bodyToken, _ = jsonobj.String(member(ms, "accessToken")); headerToken == "" && bodyToken == "" {
		return nil, serial, "", outcome.MissingToken
	}
	return ms, serial, bodyToken, outcome.Stored
}

// byteOrderMark is what some editors and Windows tools write before UTF-8
// text; JSON forbids it, but it says nothing, so it is skipped.
var byteOrderMark = []byte("\xEF\xBB\xBF")

// readMembers are the members a device request is read for, at the top
// level of either endpoint's body or in a backlog's message: one of them
// named twice is an invalid format.
var readMembers = []string{"serial", "accessToken", "data", "ts", "messages"}

// validData reports whether data is an object whose numbers all fit a
// float64: 1e400 could not be read back as the number it was sent as.
func validData(data []byte) bool {
	return len(data) > 0 && data[0] == '{' && jsonobj.Finite(data)
}

// member is the value of the last member of ms named name (nil: none); the
// names read are never repeated (head).
func member(ms []jsonobj.Member, name string) []byte {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Name == name {
			return ms[i].Value
		}
	}
	return nil
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
