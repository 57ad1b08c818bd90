package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/openapi"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

func testServer(t *testing.T) *echo.Echo {
	t.Helper()
	e, _ := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{},
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
		// The device port serves neither the workspace API nor the console.
		{"GET", "/api/v1/admin/devices/x", "", map[string]string{"Authorization": "Bearer adm"}, 404, "Not found", "No such endpoint"},
		{"PUT", "/api/v1/admin/devices/x", "{}", map[string]string{"Authorization": "Bearer adm"}, 404, "Not found", "No such endpoint"},
		{"GET", "/api/v1/admin/whoami", "", map[string]string{"Authorization": "Bearer adm"}, 404, "Not found", "No such endpoint"},
		{"GET", "/console/devices", "", nil, 404, "Not found", "No such endpoint"},
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
	_, s := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{},
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

// Every route of the device door is in the device API's document, and
// every documented operation is a route. A device endpoint with a trailing
// slash is the documented endpoint itself (routeDevice).
func TestEveryRouteIsDocumented(t *testing.T) {
	routes := slices.DeleteFunc(testServer(t).Routes(), func(r *echo.Route) bool {
		return r.Path == EventPath+"/" || r.Path == EventsPath+"/"
	})
	if n := testenv.OpenAPI(t, openapi.Device).RoutesDocumented(t, routes); n < 5 {
		t.Fatalf("only %d routes seen", n)
	}
}

// The answers that need no pipeline match the document (kin-openapi checks
// status, headers and body), and an answer that does not is caught.
func TestAnswersMatchTheDocument(t *testing.T) {
	api := testenv.OpenAPI(t, openapi.Device)
	e := testServer(t)
	for _, c := range []struct{ method, path, body, auth string }{
		{"POST", "/api/v1/deviceapi/event", `[1]`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"data":{}}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":{}}`, ""},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":3}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"s","data":{"x":"` + strings.Repeat("y", 2000) + `"}}`, "Bearer x"},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"s","messages":[]}`, "Bearer x"},
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
	e, _ := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{}, Metrics: reg, Answers: edge.NewAnswers(zap.NewNop(), reg),
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 4}})
	if n, err := testutil.GatherAndCount(reg, "ingest_api_requests_total"); err != nil || n != outcome.NumCodes() {
		t.Fatalf("%d request series before any request (%v), want %d", n, err, outcome.NumCodes())
	}
	call(e, "DELETE", "/api/v1/deviceapi/event", "", nil)
	call(e, "DELETE", "/api/v1/deviceapi/event", "", nil)
	call(e, "GET", "/nope", "", nil)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ingest_api_requests_total":
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()+" "+m.GetLabel()[1].GetValue()] = m.GetCounter().GetValue()
			}
		case "ingest_api_request_duration_seconds":
			if n := len(mf.GetMetric()); n != 2 {
				t.Errorf("%d latency series, want 2 (the event route and unmatched)", n)
			}
		}
	}
	for k, v := range map[string]float64{"method_not_allowed 405": 2, "route_not_found 404": 1, "stored 200": 0} {
		if got[k] != v {
			t.Errorf("requests{%s} = %v, want %v (%v)", k, got[k], v, got)
		}
	}
}
