package redact

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	r := New("accessToken, Password")
	const tok = "tok-3f9a1c77"
	for _, tc := range []struct{ name, in, want string }{
		{"nothing to remove: the same bytes", `{"serial":"d","data":{"temp":21.5,"note":"ok"}}`, ""},
		{"data.accessToken", `{"serial":"d","data":{"temp":1,"accessToken":"tok-3f9a1c77"}}`,
			`{"serial":"d","data":{"temp":1,"accessToken":"[redacted]"}}`},
		{"the token as any value, at any depth", `{"data":{"a":"tok-3f9a1c77","b":[1,{"c":"Bearer tok-3f9a1c77"}],"d":"x"}}`,
			`{"data":{"a":"[redacted]","b":[1,{"c":"[redacted]"}],"d":"x"}}`},
		{"the token spelled with escapes", `{"data":{"a":"tok-3f9a1c\u0037\u0037"}}`, `{"data":{"a":"[redacted]"}}`},
		{"a listed name, any case, any type", `{"data":{"PASSWORD":{"x":1},"password":42,"pw":"p"}}`,
			`{"data":{"PASSWORD":"[redacted]","password":"[redacted]","pw":"p"}}`},
		{"a member named by the token is dropped", `{"data":{"tok-3f9a1c77":1,"t":2}}`, `{"data":{"t":2}}`},
		{"escapes without a secret: unchanged values", `{"data":{"q":"a\"b","u":"\u00e9"}}`, `{"data":{"q":"a\"b","u":"\u00e9"}}`},
	} {
		got := string(r.Apply([]byte(tc.in), tok, ""))
		want := tc.want
		if want == "" {
			want = tc.in
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s: not valid JSON: %s", tc.name, got)
		}
		if strings.Contains(got, tok) {
			t.Errorf("%s: the token is still there", tc.name)
		}
	}
	// A short token is removed wherever it stands as a word, and only there.
	in := `{"data":{"a":"abc","b":"abcdef","c":"Bearer abc","d":12,"e":12.5,"f":"xabc","abc":1,"g":"abc;x"}}`
	want := `{"data":{"a":"[redacted]","b":"abcdef","c":"[redacted]","d":"[redacted]","e":"[redacted]","f":"xabc","g":"[redacted]"}}`
	if got := string(r.Apply([]byte(in), "abc", "12")); got != want {
		t.Errorf("short tokens:\n got %s\nwant %s", got, want)
	}
}

func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"data":{"a":"tok-3f9a1c77","b":[{"password":1}]}}`), "tok-3f9a1c77")
	f.Add([]byte(`[1,"x",{"y":null}]`), "secret-token")
	r := New("password")
	f.Fuzz(func(t *testing.T, doc []byte, secret string) {
		if !json.Valid(doc) {
			return
		}
		got := r.Apply(doc, secret)
		if !json.Valid(got) {
			t.Fatalf("invalid JSON out of %q: %q", doc, got)
		}
		if secret != "" && !strings.Contains(Mark, secret) {
			d := json.NewDecoder(strings.NewReader(string(got)))
			d.UseNumber()
			var v any
			_ = d.Decode(&v)
			if left := find(v, secret); left != "" {
				t.Fatalf("secret %q left in %q (%q)", secret, got, left)
			}
		}
	})
}

// find returns a key or scalar of v that holds secret: contains it, or
// for a secret shorter than minSecret, is it or has it as a word between
// spaces.
func find(v any, secret string) string {
	has := func(s string) bool {
		if len(secret) >= minSecret {
			return strings.Contains(s, secret)
		}
		return s == secret || slices.Contains(strings.Fields(s), secret)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if has(k) {
				return k
			}
			if f := find(e, secret); f != "" {
				return f
			}
		}
	case []any:
		for _, e := range x {
			if f := find(e, secret); f != "" {
				return f
			}
		}
	case string:
		if has(x) {
			return x
		}
	case json.Number:
		if has(string(x)) {
			return string(x)
		}
	}
	return ""
}
