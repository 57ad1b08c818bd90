package workspace

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/registry"
)

// testServer is the workspace listener with the bootstrap key "adm" and no
// registry behind it.
func testServer(t *testing.T, log *zap.Logger) *echo.Echo {
	t.Helper()
	return New(Deps{Log: log, Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm")})
}

func call(e *echo.Echo, method, path string, hdr map[string]string) (int, edge.Body) {
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	var b edge.Body
	_ = json.Unmarshal(rec.Body.Bytes(), &b)
	return rec.Code, b
}

// The workspace listener answers in the contract's JSON, and serves none of
// the device endpoints (they are the device port's).
func TestWorkspaceListenerServesTheWorkspaceOnly(t *testing.T) {
	e := testServer(t, zap.NewNop())
	adm := map[string]string{"Authorization": "Bearer adm"}
	for _, tc := range []struct {
		method, path   string
		hdr            map[string]string
		status         int
		message, error string
	}{
		{"GET", "/api/v1/admin/devices/x", nil, 401, "Unauthorized", "A valid admin token is required"},
		{"GET", "/api/v1/admin/devices/x", map[string]string{"Authorization": "Bearer admx"}, 401, "Unauthorized", "A valid admin token is required"},
		{"GET", "/api/v1/admin/nope", adm, 404, "Not found", "No such endpoint"},
		{"POST", "/api/v1/deviceapi/event", nil, 404, "Not found", "No such endpoint"},
		{"POST", "/api/v1/deviceapi/events", nil, 404, "Not found", "No such endpoint"},
	} {
		status, b := call(e, tc.method, tc.path, tc.hdr)
		if status != tc.status || b.Success || b.Message != tc.message || b.Error != tc.error {
			t.Errorf("%s %s = %d %+v, want %d %q %q", tc.method, tc.path, status, b, tc.status, tc.message, tc.error)
		}
	}
	if status, b := call(e, "GET", "/api/v1/admin/whoami", adm); status != 200 {
		t.Errorf("whoami = %d %+v", status, b)
	}
	req := httptest.NewRequest("GET", "/console/devices", nil)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code == http.StatusNotFound {
		t.Errorf("the console is not served: %d", rec.Code)
	}
}

// Every route of the workspace listener is in the workspace API's
// document, and every documented operation is a route.
func TestEveryRouteIsDocumented(t *testing.T) {
	if n := testenv.OpenAPI(t, openapi.Workspace).RoutesDocumented(t, testServer(t, zap.NewNop()).Routes()); n < 15 {
		t.Fatalf("only %d routes seen", n)
	}
}

// The answers that need no storage match the document.
func TestAnswersMatchTheDocument(t *testing.T) {
	api := testenv.OpenAPI(t, openapi.Workspace)
	e := testServer(t, zap.NewNop())
	for _, c := range []struct{ method, path, auth string }{
		{"GET", "/api/v1/admin/devices", ""},
		{"GET", "/api/v1/admin/whoami", "Bearer adm"},
		{"GET", "/api/v1/openapi.json", ""},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if err := api.Check(c.method, c.path, nil, nil, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("%s %s: %d %s: %v", c.method, c.path, rec.Code, rec.Body.Bytes(), err)
		}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if err := api.ValidRequest("PUT", "/api/v1/admin/devices/s", h, []byte(`{"inputs":[{"name":"t","entity":"e","entityInput":"t"}]}`)); err != nil {
		t.Errorf("a device record: %v", err)
	}
}

// One address that keeps failing authentication is refused on both
// listeners (they share the count): after its guesses at device tokens
// (counted by the device door), even the right workspace key is refused;
// an address guessing workspace keys is refused after as many failures.
func TestGuessingAddressIsRefusedOnBoth(t *testing.T) {
	failures := guard.NewFailures(20, time.Minute)
	srv := httptest.NewServer(New(Deps{Log: zap.NewNop(), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm-secret"), Failures: failures}))
	t.Cleanup(srv.Close)
	from := func(ip string) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
	}
	get := func(c *http.Client, key string) int {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/admin/devices", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		return resp.StatusCode
	}
	for range 20 { // the device door's count of 127.0.0.2's wrong device tokens
		failures.Fail(netipOf(t, "127.0.0.2"))
	}
	if got := get(from("127.0.0.2"), "adm-secret"); got != 429 {
		t.Fatalf("the address refused on the device port, with the right key: %d, want 429", got)
	}
	codes := map[int]int{}
	guesser := from("127.0.0.3")
	for i := range 25 {
		codes[get(guesser, fmt.Sprintf("adm-guess-%d", i))]++
	}
	if codes[401] != 20 || codes[429] != 5 {
		t.Fatalf("25 guesses answered %v, want 20 401s and 5 429s", codes)
	}
}

// A failed admin authentication is logged with the serial and the peer
// address (not a forwarded-for header), and never with the token tried.
func TestFailedAdminAuthIsLoggedWithoutTheToken(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := New(Deps{Log: zap.New(core), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm-secret")})
	req := httptest.NewRequest("DELETE", "/api/v1/admin/devices/dev-9", nil)
	req.Header.Set("Authorization", "Bearer adm-secreT-guess")
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	req.RemoteAddr = "192.0.2.7:5555"
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != 401 {
		t.Fatalf("status %d", rec.Code)
	}
	lines := logs.All()
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1", len(lines))
	}
	f := lines[0].ContextMap()
	if f["serial"] != "dev-9" || f["remote"] != "192.0.2.7" || f["outcome"] != "unauthorized" || f["status"] != int64(401) {
		t.Fatalf("log fields %v", f)
	}
	for k, v := range f {
		if s, _ := v.(string); strings.Contains(s, "adm-secre") {
			t.Fatalf("field %s carries the token: %q", k, s)
		}
	}
	if strings.Contains(lines[0].Message, "adm-secre") {
		t.Fatal("the message carries the token")
	}
}

// The OpenAPI document states each workspace operation's role (x-role),
// and it is the role the router enforces.
func TestWorkspaceRolesAreDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Workspace, &doc); err != nil {
		t.Fatal(err)
	}
	routes := WorkspaceRoutes()
	seen := 0
	for _, r := range routes {
		path := AdminPrefix + regexp.MustCompile(`:(\w+)`).ReplaceAllString(r.Path, "{$1}")
		var op struct {
			Role string `json:"x-role"`
		}
		if err := json.Unmarshal(doc.Paths[path][strings.ToLower(r.Method)], &op); err != nil || op.Role != string(r.Role) {
			t.Errorf("%s %s: documented role %q, routed %q (%v)", r.Method, path, op.Role, r.Role, err)
		}
		seen++
	}
	for path, ops := range doc.Paths {
		if strings.HasPrefix(path, AdminPrefix) {
			for m := range ops {
				if m != "parameters" {
					seen--
				}
			}
		}
	}
	if seen != 0 || len(routes) < 15 {
		t.Fatalf("%d routes in the table, and documented workspace operations differ by %d", len(routes), seen)
	}
}

func netipOf(t *testing.T, ip string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
