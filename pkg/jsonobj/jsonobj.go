// Package jsonobj slices the members of a JSON object and the elements of a
// JSON array out of a document, without decoding the values: the hot paths
// (ingest-api's checks, the mapper's routing) need a few names and the raw
// values behind them, not a map.
//
// The input must be valid JSON (json.Valid); on anything else the results
// are meaningless, but the functions never panic or loop.
package jsonobj

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Member is one name/value pair of a JSON object.
type Member struct {
	Name    string // unescaped
	RawName []byte // as sent, quotes included
	Value   []byte // as sent
}

// Members appends the members of the object obj to ms, in document order
// (repeated names included); ok is false when obj is not an object.
func Members(obj []byte, ms []Member) (_ []Member, ok bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] != '}' {
		end := skipString(obj, i)
		m := Member{RawName: obj[i:end]}
		var ok bool
		if m.Name, ok = String(m.RawName); !ok {
			return nil, false
		}
		i = skipSpace(obj, end)
		i = skipSpace(obj, i+1) // past ':'
		end = skipValue(obj, i)
		m.Value = obj[i:end]
		ms = append(ms, m)
		i = skipSpace(obj, end)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return ms, true
}

// Value is the value of the last member of the object obj named name (nil:
// none), as a map decoding would keep it.
func Value(obj []byte, name string) []byte {
	var buf [16]Member
	ms, _ := Members(obj, buf[:0])
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Name == name {
			return ms[i].Value
		}
	}
	return nil
}

// Repeats reports whether one of names (at most 64) names more than one
// member of ms: a document that says two things for a member it is read
// for means what the reader chooses (encoding/json keeps the last, other
// parsers the first), so it is refused rather than read.
func Repeats(ms []Member, names ...string) bool {
	var seen uint64
	for _, m := range ms {
		for j, n := range names {
			if m.Name != n {
				continue
			}
			if seen&(1<<j) != 0 {
				return true
			}
			seen |= 1 << j
		}
	}
	return false
}

// Finite reports whether every number in the valid JSON v, at any depth,
// fits a float64 (1e400 does not: encoding/json refuses it, JavaScript
// reads Infinity). Only a number with an exponent or of more than 308
// digits can be out of range, so most are not parsed.
func Finite(v []byte) bool {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			i = skipString(v, i) - 1
		case c == '-' || c >= '0' && c <= '9':
			end, exp := i, false
			for ; end < len(v) && !isDelim(v[end]); end++ {
				exp = exp || v[end]|0x20 == 'e'
			}
			if exp || end-i > 308 {
				if _, err := strconv.ParseFloat(string(v[i:end]), 64); err != nil {
					return false
				}
			}
			i = end - 1
		}
	}
	return true
}

// Elements returns the elements of the array arr, or nil when arr is not
// an array.
func Elements(arr []byte) [][]byte {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil
	}
	var out [][]byte
	i = skipSpace(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		end := max(skipValue(arr, i), i+1)
		out = append(out, arr[i:end])
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return out
}

// String decodes a JSON string value; ok is false for anything else.
func String(v []byte) (string, bool) {
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

// IsNull reports whether a value is absent or JSON null.
func IsNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

func skipSpace(b []byte, i int) int {
	i = min(i, len(b))
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return min(i+1, len(b))
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
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
		return len(b)
	}
	for i < len(b) && !isDelim(b[i]) {
		i++
	}
	return i
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
