package workspace

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/registry"
)

// oddNames are serials and names with every character that means something
// in a URL, and some that are not ASCII. "100%25" and "a%2Fb" are meant
// literally: decoded once, not twice.
var oddNames = []string{
	"AA:BB:CC:DD:EE:FF",
	"site/7/pump",
	"/lead/and/trail/",
	"ops@plant+1,2;k=v&x$y%z 1",
	"Kühlhaus-東京-№5",
	"100%25",
	"a%2Fb",
	"?#[]!'()*",
}

// uriComponent encodes s as JavaScript's encodeURIComponent does (the
// console's enc): every reserved character escaped, a space as %20.
func uriComponent(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// registryServer is a server over a real registry bucket, for the
// workspace routes that change devices.
func registryServer(t *testing.T) (*echo.Echo, *registry.Store) {
	t.Helper()
	_, js := testenv.Connect(t)
	store, err := registry.Open(context.Background(), js, registry.BucketConfig{Bucket: "params_registry"}, registry.NewCache(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := registry.NewKeyring("params-test-key-0123456789abcdef", "")
	if err != nil {
		t.Fatal(err)
	}
	return New(Deps{Log: zap.NewNop(), Registry: store, Keys: keys, AdminKeys: adminkeys.Bootstrap("adm")}), store
}

// admCall sends a workspace request whose path is given already escaped,
// as a client puts it on the wire, and decodes the JSON answer into v.
func admCall(t *testing.T, e *echo.Echo, method, rawPath, body string, v any) int {
	t.Helper()
	req := httptest.NewRequest(method, "http://x/api/v1/admin"+rawPath, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer adm")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if v != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, rawPath, rec.Code, rec.Body.Bytes(), err)
		}
	}
	return rec.Code
}

// Every path parameter means its decoded value: a device created at its
// escaped serial is the device of that serial (the one a device's body
// names), whichever escaping a client used, and so are its tokens' names.
func TestPathParametersAreDecoded(t *testing.T) {
	e, store := registryServer(t)
	for i, name := range oddNames {
		enc, alt := uriComponent(name), url.PathEscape(name)
		var made shownView
		body := `{"serial":` + quote(name) + `,"inputs":[{"name":` + quote(name) + `,"entity":` + quote(name) + `,"entityInput":` + quote(name) + `}]}`
		if st := admCall(t, e, "PUT", "/devices/"+enc, body, &made); st != 200 || made.Serial != name || made.AccessToken == "" {
			t.Fatalf("PUT /devices/%s = %d %+v, want the device %q", enc, st, made, name)
		}
		if d, err := store.Get(context.Background(), name); err != nil || d.Serial != name || d.Inputs[0].Entity != name {
			t.Fatalf("the registry holds %+v, %v under %q", d, err, name)
		}
		var got registry.View
		if st := admCall(t, e, "GET", "/devices/"+alt, "", &got); st != 200 || got.Serial != name {
			t.Fatalf("GET /devices/%s = %d %+v, want %q", alt, st, got, name)
		}
		var tok namedToken
		if st := admCall(t, e, "POST", "/devices/"+enc+"/tokens", `{"name":`+quote(name)+`}`, &tok); st != 201 || tok.Name != name {
			t.Fatalf("add token %q: %d %+v", name, st, tok)
		}
		var shown namedToken
		if st := admCall(t, e, "POST", "/devices/"+alt+"/tokens/"+enc+"/reveal", "", &shown); st != 200 || shown != tok {
			t.Fatalf("reveal %q: %d %+v, want %+v", name, st, shown, tok)
		}
		if st := admCall(t, e, "POST", "/devices/"+enc+"/tokens/"+alt+"/promote", "", &got); st != 200 || got.Tokens[0].Name != name || !got.Tokens[0].Primary {
			t.Fatalf("promote %q: %d %+v", name, st, got)
		}
		if st := admCall(t, e, "DELETE", "/devices/"+enc+"/tokens/token-1", "", nil); st != 200 {
			t.Fatalf("retire token-1 of %q: %d", name, st)
		}
		if i == 0 { // the path's serial and the body's must agree, decoded
			var b edge.Body
			if st := admCall(t, e, "PUT", "/devices/"+enc, `{"serial":"AA%3ABB%3ACC%3ADD%3AEE%3AFF"}`, &b); st != 400 {
				t.Fatalf("a body naming the escaped serial: %d %+v", st, b)
			}
		}
	}
}

// "." and ".." cannot be path segments (every URL parser resolves them), so
// they are refused as names a path would carry.
func TestDotNamesAreRefused(t *testing.T) {
	e, _ := registryServer(t)
	for _, c := range []struct{ path, body string }{
		{"/devices/%2E%2E", `{}`},
		{"/devices/dots", `{"inputs":[{"name":"t","entity":"."}]}`},
		{"/devices/dots", `{"inputs":[{"name":"t","entity":"e","entityInput":".."}]}`},
	} {
		var b edge.Body
		if st := admCall(t, e, "PUT", c.path, c.body, &b); st != 400 || !strings.Contains(b.Error, "no URL can name it") {
			t.Errorf("PUT %s %s = %d %+v, want 400", c.path, c.body, st, b)
		}
	}
	if st := admCall(t, e, "PUT", "/devices/dots", `{}`, nil); st != 200 {
		t.Fatalf("PUT /devices/dots = %d", st)
	}
	var b edge.Body
	if st := admCall(t, e, "POST", "/devices/dots/tokens", `{"name":".."}`, &b); st != 400 {
		t.Errorf("a token named ..: %d %+v", st, b)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
