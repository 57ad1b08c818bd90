package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

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
	var buf [8]member
	ms, ok := members(body, buf[:0])
	if !ok {
		return request{}, outcome.InvalidFormat
	}
	var serial, token, data, ts []byte
	hasToken := false
	for _, m := range ms {
		switch m.name {
		case "serial":
			serial = m.value
		case "accessToken":
			token, hasToken = m.value, true
		case "data":
			data = m.value
		case "ts":
			ts = m.value
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
	if !hasToken {
		_ = json.Compact(&out, body) // valid: cannot fail
		r.Payload = out.Bytes()
		return r, outcome.Stored
	}
	out.WriteByte('{')
	first := true
	for _, m := range ms {
		if m.name == "accessToken" {
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		out.Write(m.rawName)
		out.WriteByte(':')
		_ = json.Compact(&out, m.value)
	}
	out.WriteByte('}')
	r.Payload = out.Bytes()
	return r, outcome.Stored
}

// member is one name/value pair of a JSON object.
type member struct {
	name    string // unescaped
	rawName []byte // as sent, quotes included
	value   []byte // as sent
}

// members appends the members of the object body to ms; ok is false when
// body is not an object. body must be valid JSON.
func members(body []byte, ms []member) (_ []member, ok bool) {
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil, false
	}
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		end := skipString(body, i)
		m := member{rawName: body[i:end]}
		if bytes.IndexByte(m.rawName, '\\') < 0 && utf8.Valid(m.rawName) {
			m.name = string(m.rawName[1 : len(m.rawName)-1])
		} else if json.Unmarshal(m.rawName, &m.name) != nil {
			return nil, false
		}
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // past ':'
		end = skipValue(body, i)
		m.value = body[i:end]
		ms = append(ms, m)
		i = skipSpace(body, end)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return ms, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) {
		i++
	}
	return i
}

// stringValue decodes a JSON string value; ok is false for anything else.
func stringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		return string(v[1 : len(v)-1]), true
	}
	// Escapes, or bytes that are not UTF-8 (decoded as U+FFFD, as
	// encoding/json does).
	var s string
	return s, json.Unmarshal(v, &s) == nil
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

// memberValue is the value of the last member of the object obj named
// name (nil: none). obj must be a valid JSON object.
func memberValue(obj []byte, name string) []byte {
	var buf [16]member
	ms, _ := members(obj, buf[:0])
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].name == name {
			return ms[i].value
		}
	}
	return nil
}

// identity checks the serial and token members of a body (both endpoints,
// in the spec's order): a non-empty string serial, then a token in the
// header or the body (a non-string body token counts as absent).
func identity(serial, token []byte, headerToken string) (string, string, outcome.Code) {
	s, ok := stringValue(serial)
	if !ok || s == "" {
		return "", "", outcome.MissingSerial
	}
	bodyToken, _ := stringValue(token)
	if headerToken == "" && bodyToken == "" {
		return "", "", outcome.MissingToken
	}
	return s, bodyToken, outcome.Stored
}
