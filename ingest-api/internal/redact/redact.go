// Package redact removes secrets from what is kept of a device's message
// (the Messages view, stored values, dead letters): every string that
// holds a token the request carried, at any depth, whatever the token's
// length, and the value of every member whose name an operator listed
// (REDACT_KEYS), whatever its type.
package redact

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/devicehub/eventservice/pkg/jsonobj"
)

// Mark replaces what was removed.
const Mark = `"[redacted]"`

// minSecret is the shortest secret removed wherever it appears inside a
// text. A shorter one (a token set before tokens had a minimum length)
// would blank ordinary values that happen to contain it ("21" in 21.5), so
// it is removed where it stands as a word: the whole value or name, or
// with no letter or digit on either side ("Bearer abc", "abc;").
const minSecret = 6

// Redactor holds the member names whose values are always removed.
type Redactor struct {
	keys []string // lower case
}

// New takes a comma-separated list of member names (matched without
// regard to case).
func New(keys string) *Redactor {
	r := &Redactor{}
	for _, k := range strings.Split(keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			r.keys = append(r.keys, strings.ToLower(k))
		}
	}
	return r
}

// Apply returns the valid JSON document doc with every string (or number)
// that contains one of secrets, every member whose name contains one, and the
// value of every member named in the key list replaced by Mark (members
// named by a secret are dropped). It returns doc itself when there is
// nothing to remove, which is the common case and costs a scan.
func (r *Redactor) Apply(doc []byte, secrets ...string) []byte {
	live := slices.DeleteFunc(slices.Clone(secrets), func(s string) bool { return s == "" })
	if !r.suspect(doc, live) {
		return doc
	}
	var out bytes.Buffer
	out.Grow(len(doc))
	r.value(&out, doc, live)
	return out.Bytes()
}

// suspect reports whether doc may hold something to remove: an escape
// (which could spell a secret), a secret, or a listed name.
func (r *Redactor) suspect(doc []byte, secrets []string) bool {
	return bytes.IndexByte(doc, '\\') >= 0 ||
		slices.ContainsFunc(secrets, func(s string) bool { return bytes.Contains(doc, []byte(s)) }) ||
		slices.ContainsFunc(r.keys, func(k string) bool { return containsFold(doc, k) })
}

func (r *Redactor) value(out *bytes.Buffer, v []byte, secrets []string) {
	switch {
	case len(v) > 0 && v[0] == '{':
		var buf [16]jsonobj.Member
		ms, _ := jsonobj.Members(v, buf[:0])
		out.WriteByte('{')
		first := true
		for _, m := range ms {
			if holds(m.Name, secrets) {
				continue
			}
			if !first {
				out.WriteByte(',')
			}
			first = false
			out.Write(m.RawName)
			out.WriteByte(':')
			if r.listed(m.Name) {
				out.WriteString(Mark)
				continue
			}
			r.value(out, m.Value, secrets)
		}
		out.WriteByte('}')
	case len(v) > 0 && v[0] == '[':
		out.WriteByte('[')
		for i, e := range jsonobj.Elements(v) {
			if i > 0 {
				out.WriteByte(',')
			}
			r.value(out, e, secrets)
		}
		out.WriteByte(']')
	default: // a string, a number (a device could send its token as one), true, false, null
		s, ok := jsonobj.String(v)
		if !ok {
			s = string(v)
		}
		if holds(s, secrets) {
			out.WriteString(Mark)
			return
		}
		out.Write(v)
	}
}

func (r *Redactor) listed(name string) bool {
	return slices.ContainsFunc(r.keys, func(k string) bool { return strings.EqualFold(name, k) })
}

func holds(s string, secrets []string) bool {
	return slices.ContainsFunc(secrets, func(sec string) bool {
		if len(sec) >= minSecret {
			return strings.Contains(s, sec)
		}
		return containsWord(s, sec)
	})
}

// containsWord reports whether s holds sec with no ASCII letter or digit
// right before or after it.
func containsWord(s, sec string) bool {
	for i := 0; i+len(sec) <= len(s); i++ {
		j := strings.Index(s[i:], sec)
		if j < 0 {
			return false
		}
		i += j
		if end := i + len(sec); (i == 0 || !alnum(s[i-1])) && (end == len(s) || !alnum(s[end])) {
			return true
		}
	}
	return false
}

func alnum(c byte) bool { return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'z' }

// containsFold reports whether b contains the lower-case ASCII or UTF-8
// text k, ignoring case.
func containsFold(b []byte, k string) bool {
	n := len(k)
	for i := 0; i+n <= len(b); i++ {
		if c := b[i]; c|0x20 == k[0]|0x20 || c >= utf8.RuneSelf {
			if bytes.EqualFold(b[i:i+n], []byte(k)) {
				return true
			}
		}
	}
	return false
}
