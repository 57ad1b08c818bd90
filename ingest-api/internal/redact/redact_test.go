package redact

import (
	"encoding/json"
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
	if got := string(r.Apply([]byte(`{"a":"abc"}`), "abc")); got != `{"a":"abc"}` {
		t.Errorf("a secret shorter than %d bytes blanks values: %s", minSecret, got)
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
		if len(secret) >= minSecret && !strings.Contains(Mark, secret) {
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

// find returns a key or scalar of v that contains secret.
func find(v any, secret string) string {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, secret) {
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
		if strings.Contains(x, secret) {
			return x
		}
	case json.Number:
		if strings.Contains(string(x), secret) {
			return string(x)
		}
	}
	return ""
}
