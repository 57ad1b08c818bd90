package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/integration/testenv"
)

// testDocumentedAnswers sends one request of every kind to the running
// ingest-api and checks each answer against the document its listener
// serves (the device port's, the workspace listener's).
func testDocumentedAnswers(t *testing.T, s *stack) {
	docs := map[string]*testenv.API{}
	for _, base := range []string{s.base, s.ws} {
		served := s.doOn(t, base, http.MethodGet, docPath, nil, nil)
		if served.Status != 200 {
			t.Fatalf("%s%s: %d", base, docPath, served.Status)
		}
		docs[base] = testenv.OpenAPI(t, served.Raw)
	}
	adm := map[string]string{"Authorization": "Bearer " + adminToken}
	dev := bearer(tokA)
	big := `{"serial":"dev-A","data":{"temp":"` + strings.Repeat("x", 1<<20) + `"}}`
	statuses := map[int]bool{}
	for _, c := range []struct {
		method, path, body string
		header             map[string]string
	}{
		{"POST", "/api/v1/deviceapi/event", `{"serial":"dev-A","data":{"temp":40}}`, dev},
		{"POST", "/api/v1/deviceapi/event", `[1]`, dev},
		{"POST", "/api/v1/deviceapi/event", `{"data":{}}`, dev},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"dev-A","data":{}}`, nil},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"dev-A","data":3}`, dev},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"nobody","data":{}}`, dev},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"dev-A","data":{"temp":1}}`, bearer("wrong")},
		{"POST", "/api/v1/deviceapi/event", `{"serial":"dev-A","data":{"nothing":1}}`, dev},
		{"POST", "/api/v1/deviceapi/event", big, dev},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"dev-A","messages":[{"data":{"temp":41}},{"data":{"temp":42}}]}`, dev},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"dev-A","messages":[{"data":{"temp":43}},7,{"data":{"x":1}}]}`, dev},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"dev-A","messages":[]}`, dev},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"dev-A","messages":[{"data":{}}]}`, nil},
		{"POST", "/api/v1/deviceapi/events", `{"serial":"nobody","messages":[{"data":{}}]}`, dev},
		{"GET", "/healthz", "", nil},
		{"GET", "/readyz", "", nil},
		{"PUT", "/api/v1/admin/devices/dev-O", `{"inputs":[{"name":"t","entity":"oa","entityInput":"t"}]}`, adm},
		{"PUT", "/api/v1/admin/devices/dev-O2", `{"connectionType":"LoRa"}`, adm},
		{"PUT", "/api/v1/admin/devices/dev-O", `{}`, nil},
		{"GET", "/api/v1/admin/devices/dev-O", "", adm},
		{"GET", "/api/v1/admin/devices/dev-none", "", adm},
		{"GET", "/api/v1/admin/devices/dev-A/messages?limit=5", "", adm},
		{"GET", "/api/v1/admin/devices/dev-A/messages?limit=0", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/latest", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/none/latest", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/series?limit=3", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/series?from=x", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/series?step=1h", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/series?points=50", "", adm},
		{"GET", "/api/v1/admin/entities/boiler-1/inputs/temperature/series?points=0", "", adm},
		{"GET", "/api/v1/admin/devices?limit=1", "", adm},
		{"GET", "/api/v1/admin/devices?prefix=dev-&limit=1000", "", adm},
		{"GET", "/api/v1/admin/devices?limit=x", "", adm},
		{"GET", "/api/v1/admin/devices", "", nil},
		{"GET", "/api/v1/admin/entities", "", adm},
		{"GET", "/api/v1/admin/entities?cursor=!", "", adm},
		{"POST", "/api/v1/admin/devices/dev-O/backfills", `{"from":"2026-01-01T00:00:00Z"}`, adm},
		{"POST", "/api/v1/admin/devices/dev-O/backfills", `{"from":"2026-01-01T00:00:00Z"}`, adm},
		{"POST", "/api/v1/admin/devices/dev-O/backfills", `{"from":"x"}`, adm},
		{"GET", "/api/v1/admin/devices/dev-O/backfills", "", adm},
		{"DELETE", "/api/v1/admin/devices/dev-O/backfills/none", "", adm},
		{"DELETE", "/api/v1/admin/devices/dev-O", "", adm},
		{"DELETE", "/api/v1/admin/devices/dev-O", "", adm},
	} {
		base := s.base
		if strings.HasPrefix(c.path, "/api/v1/admin/") {
			base = s.ws
		}
		r := s.doOn(t, base, c.method, c.path, []byte(c.body), c.header)
		statuses[r.Status] = true
		if err := docs[base].Check(c.method, c.path, nil, nil, r.Status, r.Header, r.Raw); err != nil {
			t.Errorf("%s %s: %v", c.method, c.path, err)
		}
	}
	for _, want := range []int{200, 202, 204, 400, 401, 404, 409, 413, 422} {
		if !statuses[want] {
			t.Errorf("no answer with status %d was checked", want)
		}
	}
}

// conformEvent checks an answer of the event endpoint against the document.
func conformEvent(t *testing.T, r reply) {
	t.Helper()
	if err := repoDoc(t).Check("POST", "/api/v1/deviceapi/event", nil, nil, r.Status, r.Header, r.Raw); err != nil {
		t.Error(err)
	}
}

// docPath is where each listener of ingest-api serves its OpenAPI document.
const docPath = "/api/v1/openapi.json"

// repoDoc parses the device API's OpenAPI document as committed.
func repoDoc(t *testing.T) *testenv.API {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "ingest-api/internal/openapi/device.json"))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.OpenAPI(t, raw)
}
