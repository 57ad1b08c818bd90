package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/devicehub/eventservice/ingest-api/internal/adminkeys"
	"github.com/devicehub/eventservice/ingest-api/internal/console"
	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

func testServer(t *testing.T) *echo.Echo {
	t.Helper()
	e, _ := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm"),
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 4}})
	return e
}

func call(e *echo.Echo, method, path, body string, hdr map[string]string) (int, Body, http.Header) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	var b Body
	_ = json.Unmarshal(rec.Body.Bytes(), &b)
	return rec.Code, b, rec.Header()
}

func TestEveryErrorIsTheContractsJSON(t *testing.T) {
	e := testServer(t)
	e.GET("/boom", func(echo.Context) error { panic("kaboom") })
	for _, tc := range []struct {
		method, path, body string
		hdr                map[string]string
		status             int
		message, error     string
	}{
		{"GET", "/boom", "", nil, 500, "Failed to process message", "internal error"},
		{"GET", "/nope", "", nil, 404, "Not found", "No such endpoint"},
		{"DELETE", "/api/v1/deviceapi/event", "", nil, 405, "Method not allowed", "Method not allowed on this endpoint"},
		{"GET", "/api/v1/admin/devices/x", "", nil, 401, "Unauthorized", "A valid admin token is required"},
		{"GET", "/api/v1/admin/devices/x", "", map[string]string{"Authorization": "Bearer admx"}, 401, "Unauthorized", "A valid admin token is required"},
		{"POST", "/api/v1/deviceapi/event", strings.Repeat(" ", 2<<10), nil, 413, "Payload too large", "Request body exceeds the limit"},
		{"POST", "/api/v1/deviceapi/event", "{}", map[string]string{"Content-Encoding": "gzip"}, 400, "Invalid message format", "Message must be a valid JSON object"},
		{"POST", "/api/v1/deviceapi/event", "{}", map[string]string{"Content-Encoding": "br"}, 400, "Invalid message format", "Message must be a valid JSON object"},
	} {
		status, b, _ := call(e, tc.method, tc.path, tc.body, tc.hdr)
		if status != tc.status || b.Success || b.Message != tc.message || b.Error != tc.error {
			t.Errorf("%s %s = %d %+v, want %d %q %q", tc.method, tc.path, status, b, tc.status, tc.message, tc.error)
		}
	}
	status, b, _ := call(e, "GET", "/healthz", "", nil)
	if status != 200 || !b.Success {
		t.Errorf("healthz = %d %+v", status, b)
	}
}

func TestInFlightBoundAnswers503(t *testing.T) {
	// Fill every in-flight slot, as requests waiting for outcomes would.
	_, s := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm"),
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 2}})
	s.cache = registry.NewCache()
	s.cache.Put(registry.Device{Serial: "a", ConnectionType: registry.ConnectionAPI, AccessToken: "tok-a"}, 1)
	s.inflight <- struct{}{}
	s.inflight <- struct{}{}
	ec := echo.New()
	// The slot is taken once the device authenticated.
	req := httptest.NewRequest("POST", "/api/v1/deviceapi/event", strings.NewReader(`{"serial":"a","accessToken":"tok-a","data":{}}`))
	rec := httptest.NewRecorder()
	if err := s.postEvent(ec.NewContext(req, rec)); err != nil {
		t.Fatal(err)
	}
	var b Body
	_ = json.Unmarshal(rec.Body.Bytes(), &b)
	if rec.Code != 503 || b.Message != "Failed to process message" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("over the bound: %d %+v %v", rec.Code, b, rec.Header())
	}
}

// A failed admin authentication is logged with the serial and the peer
// address (not a forwarded-for header), and never with the token tried.
func TestFailedAdminAuthIsLoggedWithoutTheToken(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e, _ := New(Deps{Log: zap.New(core), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm-secret"),
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 4}})
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

// Every route of the router is in the OpenAPI document, and every
// documented operation is a route.
func TestEveryRouteIsDocumented(t *testing.T) {
	doc := testenv.OpenAPI(t, openapi.Doc).Doc
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	routed := map[string]bool{}
	for _, r := range testServer(t).Routes() {
		if strings.HasPrefix(r.Method, "echo_") { // Echo's own not-found routes of a group
			continue
		}
		if r.Path == "/console" || strings.HasPrefix(r.Path, console.Prefix) {
			continue // the console's pages and assets, not the API (docs/console.md)
		}
		parts := strings.Split(r.Path, "/")
		for i, p := range parts {
			if name, ok := strings.CutPrefix(p, ":"); ok {
				parts[i] = "{" + name + "}"
			}
		}
		op := r.Method + " " + strings.Join(parts, "/")
		routed[op] = true
		if !documented[op] {
			t.Errorf("route %s is not in the OpenAPI document", op)
		}
	}
	for op := range documented {
		if !routed[op] {
			t.Errorf("documented %s is not a route", op)
		}
	}
	if len(routed) < 10 {
		t.Fatalf("only %d routes seen", len(routed))
	}
}

// The answers that need no pipeline match the document (kin-openapi checks
// status, headers and body), and an answer that does not is caught.
func TestAnswersMatchTheDocument(t *testing.T) {
	api := testenv.OpenAPI(t, openapi.Doc)
	e := testServer(t)
	for _, c := range []struct{ method, path, body, auth string }{
		{"POST", "/api/v1/deviceapi/event", `[1]`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"data":{}}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":{}}`, ""},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":3}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":{"x":"` + strings.Repeat("y", 2000) + `"}}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"s","messages":[]}`, "Bearer x"},
		{"GET", "/api/v1/admin/devices", "", ""},
		{"GET", "/api/v1/admin/whoami", "", "Bearer adm"},
		{"GET", "/healthz", "", ""},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if err := api.Check(c.method, c.path, nil, nil, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("%s %s %s: %d %s: %v", c.method, c.path, c.body, rec.Code, rec.Body.Bytes(), err)
		}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	// The document describes what clients send: a well-formed reading and
	// device record pass, a reading whose data is no object does not.
	for _, ok := range []struct{ method, path, body string }{
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":{"t":1},"ts":"2026-11-25T00:00:00Z"}`},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"s","messages":[{"data":{"t":1}}]}`},
		{"PUT", "/api/v1/admin/devices/s", `{"inputs":[{"name":"t","entity":"e","entityInput":"t"}]}`},
	} {
		if err := api.ValidRequest(ok.method, ok.path, h, []byte(ok.body)); err != nil {
			t.Errorf("%s %s %s: %v", ok.method, ok.path, ok.body, err)
		}
	}
	if api.ValidRequest("POST", "/api/v1/deviceapi/event", h, []byte(`{"serial":"s","data":3}`)) == nil {
		t.Error("a reading whose data is a number passed the document")
	}
	for _, bad := range []struct {
		status int
		body   string
	}{
		{200, `{"success":true}`},                            // no message
		{418, `{"success":false,"message":"x"}`},             // an undocumented status
		{400, `{"success":"no","message":"x"}`},              // a wrong type
		{503, `{"success":false,"message":"x","error":"y"}`}, // no Retry-After
	} {
		if api.Check("POST", "/api/v1/deviceapi/event", nil, nil, bad.status, h, []byte(bad.body)) == nil {
			t.Errorf("%d %s passed the check", bad.status, bad.body)
		}
	}
}

// Every answer is counted under its outcome and status, and every outcome's
// series exists before its first request.
func TestRequestsAreCountedByOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, s := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{}, AdminKeys: adminkeys.Bootstrap("adm"), Metrics: reg,
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 4}})
	if n := testutil.CollectAndCount(s.metrics.requests); n != outcome.NumCodes() {
		t.Fatalf("%d request series before any request, want %d", n, outcome.NumCodes())
	}
	call(e, "GET", "/api/v1/admin/devices/x", "", nil)
	call(e, "GET", "/api/v1/admin/devices/x", "", nil)
	call(e, "GET", "/nope", "", nil)
	for _, c := range []struct {
		outcome, status string
		want            float64
	}{{"unauthorized", "401", 2}, {"route_not_found", "404", 1}, {"stored", "200", 0}} {
		if got := testutil.ToFloat64(s.metrics.requests.WithLabelValues(c.outcome, c.status)); got != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.outcome, c.status, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(s.metrics.duration); n != 2 {
		t.Errorf("%d latency series, want 2 (the admin route and unmatched)", n)
	}
}

// The pre-rendered success answer is what Echo renders for it.
func TestStoredAnswerIsRenderedAsEchoWould(t *testing.T) {
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest("POST", "/", nil), rec)
	status, body := BodyFor(outcome.Stored, "", "")
	if err := c.JSON(status, body); err != nil {
		t.Fatal(err)
	}
	if rec.Body.String() != string(storedJSON) {
		t.Fatalf("Echo renders %q, pre-rendered %q", rec.Body.String(), storedJSON)
	}
}

// The OpenAPI document states each workspace operation's role (x-role),
// and it is the role the router enforces.
func TestWorkspaceRolesAreDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Doc, &doc); err != nil {
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
