package integration

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

const (
	tokA     = "tok-5f0c2b9e71d4-A-9d1c42e07b"
	tokMQTT  = "tok-5f0c2b9e71d4-M-55ab10e3cc"
	tokNoMap = "tok-5f0c2b9e71d4-N-0f61de77aa"
	userJWT  = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTEifQ.c2lnbmF0dXJl"
)

// eventually waits for cond (testenv.WaitFor): stall is how long it may go
// without the programs of the test using any CPU, which on an idle machine
// is also about how long cond takes at most.
func eventually(t *testing.T, stall time.Duration, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, "condition", stall, childrenProgress, nil, cond)
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func expect(t *testing.T, r reply, status int, message, errText string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status = %d, want %d (%s)", r.Status, status, r.Raw)
	}
	if r.Body["message"] != message {
		t.Errorf("message = %q, want %q", r.Body["message"], message)
	}
	if errText == "" {
		if _, has := r.Body["error"]; has {
			t.Errorf("error present on success: %s", r.Raw)
		}
		if r.Body["success"] != true {
			t.Errorf("success = %v, want true", r.Body["success"])
		}
		return
	}
	if r.Body["success"] != false {
		t.Errorf("success = %v, want false", r.Body["success"])
	}
	if r.Body["error"] != errText {
		t.Errorf("error = %q, want %q", r.Body["error"], errText)
	}
}

func provision(t *testing.T, s *stack) {
	t.Helper()
	for _, d := range []struct{ serial, body string }{
		{"dev-A", `{"connectionType":"API","accessToken":"` + tokA + `","inputs":[
			{"name":"temp","entity":"boiler-1","entityInput":"temperature"},
			{"name":"on","entity":"boiler-1","entityInput":"running"},
			{"name":"mode","entity":"boiler-1"},
			{"name":"cfg","entity":"boiler-1","entityInput":"config"},
			{"name":"volt"}]}`},
		{"dev-M", `{"connectionType":"MQTT","accessToken":"` + tokMQTT + `","inputs":[{"name":"temp","entity":"x","entityInput":"y"}]}`},
		{"dev-N", `{"connectionType":"API","accessToken":"` + tokNoMap + `","inputs":[{"name":"volt"}]}`},
	} {
		if r := s.admin(t, http.MethodPut, "/devices/"+d.serial, d.body); r.Status != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", d.serial, r.Status, r.Raw)
		}
	}
}

func TestPipeline(t *testing.T) {
	s := startStack(t)
	provision(t, s)

	t.Run("rejections follow the spec table exactly", func(t *testing.T) { testRejections(t, s) })
	t.Run("stored value is readable at once", func(t *testing.T) { testStoreAndRead(t, s) })
	t.Run("value kinds and null", func(t *testing.T) { testValueKinds(t, s) })
	t.Run("user JWT in header and device token in body", func(t *testing.T) {
		r := s.post(t, `{"serial":"dev-A","accessToken":"`+tokA+`","data":{"temp":30}}`, bearer(userJWT))
		expect(t, r, 200, "Message processed and data stored successfully", "")
	})
	t.Run("gzip body and odd content type", func(t *testing.T) {
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write([]byte(`{"serial":"dev-A","data":{"temp":31}}`))
		_ = zw.Close()
		r := s.do(t, http.MethodPost, "/api/v1/deviceapi/event", zb.Bytes(), map[string]string{
			"Authorization": "bearer " + tokA, "Content-Encoding": "gzip", "Content-Type": "text/plain",
		})
		expect(t, r, 200, "Message processed and data stored successfully", "")
	})
	t.Run("300 concurrent posts store 300 values", func(t *testing.T) { testConcurrent(t, s) })
	t.Run("workspace API", func(t *testing.T) { testWorkspace(t, s) })
	t.Run("metrics follow what happened", func(t *testing.T) { testMetrics(t, s) })
	t.Run("dashboard and alerts use exported metrics", func(t *testing.T) { testMonitoringNames(t, s) })
	t.Run("every answer matches the API document", func(t *testing.T) { testDocumentedAnswers(t, s) })
	t.Run("a device's token inside data is not kept", func(t *testing.T) {
		r := s.post(t, `{"serial":"dev-A","data":{"temp":22.5,"accessToken":"`+tokA+`","note":"token=`+tokA+`","cfg":{"password":"hunter2","v":[1,"`+tokA+`"]}}}`, bearer(tokA))
		expect(t, r, 200, "Message processed and data stored successfully", "")
		r = s.postBacklog(t, `{"serial":"dev-A","accessToken":"`+tokA+`","messages":[{"data":{"temp":22.6,"fw":{"key":"`+tokA+`"}}}]}`, nil)
		if r.Status != 200 || r.Body["success"] != true {
			t.Fatalf("backlog: %d %s", r.Status, r.Raw)
		}
		var raw string
		eventually(t, 5*time.Second, func() bool {
			raw = string(s.admin(t, http.MethodGet, "/devices/dev-A/messages?limit=5", "").Raw)
			return strings.Contains(raw, "22.6") && strings.Contains(raw, "22.5")
		})
		if strings.Contains(raw, tokA) || strings.Contains(raw, "hunter2") {
			t.Fatalf("the Messages view keeps a secret: %s", raw)
		}
		if got := strings.Count(raw, `[redacted]`); got != 5 {
			t.Fatalf("%d values redacted in the Messages view, want 5 (accessToken, note, password, v[1], fw.key): %s", got, raw)
		}
	})
	t.Run("tokens never reach logs or stored payloads", func(t *testing.T) {
		logs := s.logs()
		if !strings.Contains(logs, "request rejected") {
			t.Fatal("expected rejection log lines to check")
		}
		for _, tok := range []string{tokA, tokMQTT, tokNoMap, adminToken, userJWT, "wrong-token-123"} {
			if strings.Contains(logs, tok) {
				t.Errorf("a token appears in the logs: %s...", tok[:6])
			}
			if n := s.count(t, "device_messages WHERE position(payload, ?) > 0", tok); n != 0 {
				t.Errorf("a token appears in %d stored payloads: %s...", n, tok[:6])
			}
			if n := s.count(t, "input_values WHERE position(value_json, ?) > 0", tok); n != 0 {
				t.Errorf("a token appears in %d stored values: %s...", n, tok[:6])
			}
		}
	})
}

func testRejections(t *testing.T, s *stack) {
	big := `{"serial":"dev-A","data":{"temp":"` + strings.Repeat("x", 1<<20) + `"}}`
	for _, tc := range []struct {
		name    string
		body    string
		header  map[string]string
		status  int
		message string
		errText string
	}{
		{"not JSON", `{"serial":`, bearer(tokA), 400, "Invalid message format", "Message must be a valid JSON object"},
		{"array", `[1,2]`, bearer(tokA), 400, "Invalid message format", "Message must be a valid JSON object"},
		{"null", `null`, bearer(tokA), 400, "Invalid message format", "Message must be a valid JSON object"},
		{"empty body", ``, nil, 400, "Invalid message format", "Message must be a valid JSON object"},
		{"format before everything", `"x"`, nil, 400, "Invalid message format", "Message must be a valid JSON object"},
		{"missing serial", `{"data":{"temp":1}}`, bearer(tokA), 400, "Missing serial number", "Device serial number is required"},
		{"empty serial", `{"serial":"","data":{"temp":1}}`, bearer(tokA), 400, "Missing serial number", "Device serial number is required"},
		{"serial before token", `{"data":{}}`, nil, 400, "Missing serial number", "Device serial number is required"},
		{"missing token", `{"serial":"dev-A","data":{"temp":1}}`, nil, 401, "Missing access token", "Device access token is required (either in data or as Bearer token)"},
		{"token before data", `{"serial":"dev-A","data":"x"}`, nil, 401, "Missing access token", "Device access token is required (either in data or as Bearer token)"},
		{"data is a string", `{"serial":"dev-A","data":"x"}`, bearer(tokA), 400, "Invalid data format", "Message data must be a valid object"},
		{"data is an array", `{"serial":"dev-A","data":[1]}`, bearer(tokA), 400, "Invalid data format", "Message data must be a valid object"},
		{"data missing", `{"serial":"dev-A"}`, bearer(tokA), 400, "Invalid data format", "Message data must be a valid object"},
		{"data before device", `{"serial":"nope","data":5}`, bearer(tokA), 400, "Invalid data format", "Message data must be a valid object"},
		{"unknown device", `{"serial":"nope-1","data":{"temp":1}}`, bearer(tokA), 404, "Device not found", "Device with serial nope-1 not found"},
		{"wrong token", `{"serial":"dev-A","data":{"temp":1}}`, bearer("wrong-token-123"), 401, "Invalid access token", "Invalid access token for device with serial dev-A"},
		{"wrong body token", `{"serial":"dev-A","accessToken":"wrong-token-123","data":{"temp":1}}`, nil, 401, "Invalid access token", "Invalid access token for device with serial dev-A"},
		{"MQTT device with its right token", `{"serial":"dev-M","data":{"temp":1}}`, bearer(tokMQTT), 401, "Invalid access token", "Invalid access token for device with serial dev-M"},
		{"no key connected", `{"serial":"dev-A","data":{"volt":3.3,"other":1}}`, bearer(tokA), 422, "No connections configured", "No connections found for this device"},
		{"device without mapping", `{"serial":"dev-N","data":{"volt":3.3}}`, bearer(tokNoMap), 422, "No connections configured", "No connections found for this device"},
		{"empty data", `{"serial":"dev-A","data":{}}`, bearer(tokA), 422, "No connections configured", "No connections found for this device"},
		{"body over the limit", big, bearer(tokA), 413, "Payload too large", "Request body exceeds the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, s.post(t, tc.body, tc.header), tc.status, tc.message, tc.errText)
		})
	}
	t.Run("unknown route and wrong method answer JSON", func(t *testing.T) {
		expect(t, s.do(t, http.MethodGet, "/nope", nil, nil), 404, "Not found", "No such endpoint")
		expect(t, s.do(t, http.MethodGet, "/api/v1/deviceapi/event", nil, nil), 405, "Method not allowed", "Method not allowed on this endpoint")
	})
	t.Run("no-connections message is kept for the Messages view", func(t *testing.T) {
		// The raw message log is a downstream stage (spec section 1): it
		// follows the answer within milliseconds, not before it.
		var r reply
		var msgs []any
		eventually(t, 5*time.Second, func() bool {
			r = s.admin(t, http.MethodGet, "/devices/dev-N/messages?limit=5", "")
			msgs, _ = r.Body["messages"].([]any)
			return len(msgs) > 0
		})
		if r.Status != 200 || len(msgs) != 1 {
			t.Fatalf("messages of dev-N: %d %s", r.Status, r.Raw)
		}
		m := msgs[0].(map[string]any)
		if m["outcome"] != "No connections configured" {
			t.Errorf("outcome = %v", m["outcome"])
		}
	})
}

func testStoreAndRead(t *testing.T, s *stack) {
	before := time.Now().Add(-time.Second).UTC()
	r := s.post(t, `{"serial":"dev-A","accessToken":"`+tokA+`","data":{"temp":21.5,"volt":3.3,"unknown":7}}`, map[string]string{"Content-Type": "application/json"})
	expect(t, r, 200, "Message processed and data stored successfully", "")

	// Stored means queryable: no waiting, no retry loop.
	if n := s.count(t, "input_values WHERE entity = 'boiler-1' AND input = 'temperature' AND value_json = '21.5'"); n != 1 {
		t.Fatalf("ClickHouse holds %d rows of the reading, want 1", n)
	}
	if n := s.count(t, "input_values WHERE device_input IN ('volt', 'unknown')"); n != 0 {
		t.Fatalf("unconnected inputs stored: %d rows", n)
	}
	latest := s.admin(t, http.MethodGet, "/entities/boiler-1/inputs/temperature/latest", "")
	if latest.Status != 200 || latest.Body["value"] != 21.5 || latest.Body["serial"] != "dev-A" ||
		latest.Body["entity"] != "boiler-1" || latest.Body["input"] != "temperature" {
		t.Fatalf("latest = %d %s", latest.Status, latest.Raw)
	}
	ts, err := time.Parse(time.RFC3339Nano, latest.Body["ts"].(string))
	if err != nil || ts.Before(before) || ts.After(time.Now().Add(time.Second)) || !strings.Contains(latest.Body["ts"].(string), ".") {
		t.Fatalf("latest ts = %v (%v)", latest.Body["ts"], err)
	}

	// Two more readings: the series returns all three in arrival order.
	for _, v := range []string{"22", "23.25"} {
		expect(t, s.post(t, `{"serial":"dev-A","data":{"temp":`+v+`}}`, bearer(tokA)), 200, "Message processed and data stored successfully", "")
	}
	from := before.Format(time.RFC3339)
	series := s.admin(t, http.MethodGet, "/entities/boiler-1/inputs/temperature/series?from="+from+"&limit=3", "")
	pts, _ := series.Body["points"].([]any)
	if series.Status != 200 || len(pts) != 3 {
		t.Fatalf("series = %d %s", series.Status, series.Raw)
	}
	for i, want := range []float64{21.5, 22, 23.25} {
		if got := pts[i].(map[string]any)["value"]; got != want {
			t.Errorf("point %d = %v, want %v", i, got, want)
		}
	}

	var msgs reply
	var list []any
	eventually(t, 5*time.Second, func() bool {
		msgs = s.admin(t, http.MethodGet, "/devices/dev-A/messages?limit=10", "")
		list, _ = msgs.Body["messages"].([]any)
		return len(list) >= 3
	})
	found := false
	for _, m := range list {
		p, _ := json.Marshal(m.(map[string]any)["payload"])
		if strings.Contains(string(p), `"temp":21.5`) {
			found = true
			if strings.Contains(string(p), "accessToken") || strings.Contains(string(p), tokA) {
				t.Errorf("stored payload keeps the token: %s", p)
			}
			if m.(map[string]any)["outcome"] != "Message processed and data stored successfully" {
				t.Errorf("outcome = %v", m.(map[string]any)["outcome"])
			}
		}
	}
	if !found {
		t.Fatalf("Messages view lacks the message: %s", msgs.Raw)
	}
	if nf := s.admin(t, http.MethodGet, "/entities/boiler-1/inputs/nothing/latest", ""); nf.Status != 404 {
		t.Errorf("latest of an input without values = %d", nf.Status)
	}
}

func testValueKinds(t *testing.T, s *stack) {
	r := s.post(t, `{"serial":"dev-A","data":{"on":true,"mode":"eco","cfg":{"a":[1,null]},"temp":null}}`, bearer(tokA))
	expect(t, r, 200, "Message processed and data stored successfully", "")
	for input, want := range map[string]any{"running": true, "mode": "eco", "config": map[string]any{"a": []any{1.0, nil}}} {
		l := s.admin(t, http.MethodGet, "/entities/boiler-1/inputs/"+input+"/latest", "")
		got, _ := json.Marshal(l.Body["value"])
		exp, _ := json.Marshal(want)
		if l.Status != 200 || string(got) != string(exp) {
			t.Errorf("latest %s = %s, want %s", input, got, exp)
		}
	}
	if n := s.count(t, "input_values WHERE input = 'running' AND value_type = 'bool' AND value_num = 1"); n != 1 {
		t.Errorf("bool numeric projection rows = %d, want 1", n)
	}
	if n := s.count(t, "input_values WHERE value_json = 'null'"); n != 0 {
		t.Errorf("null stored %d times", n)
	}
}

func testConcurrent(t *testing.T, s *stack) {
	s.admin(t, http.MethodPut, "/devices/dev-C", `{"accessToken":"tok-5f0c2b9e71d4-C-1","inputs":[{"name":"n","entity":"load","entityInput":"n"}]}`)
	const n = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.post(t, fmt.Sprintf(`{"serial":"dev-C","data":{"n":%d}}`, i), bearer("tok-5f0c2b9e71d4-C-1"))
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != n {
		t.Fatalf("statuses = %v, want %d x 200", statuses, n)
	}
	if got := s.count(t, "input_values WHERE entity = 'load'"); got != n {
		t.Fatalf("ClickHouse holds %d values, want %d", got, n)
	}
	if got := s.count(t, "input_values WHERE entity = 'load' AND value_json IN (SELECT DISTINCT value_json FROM "+s.db+".input_values WHERE entity = 'load')"); got != n {
		t.Fatalf("ClickHouse holds %d distinct values, want %d", got, n)
	}
}

func testWorkspace(t *testing.T, s *stack) {
	if r := s.doOn(t, s.ws, http.MethodGet, "/api/v1/admin/devices/dev-A", nil, nil); r.Status != 401 || r.Body["success"] != false {
		t.Errorf("no admin token: %d %s", r.Status, r.Raw)
	}
	if r := s.doOn(t, s.ws, http.MethodGet, "/api/v1/admin/devices/dev-A", nil, bearer(tokA)); r.Status != 401 {
		t.Errorf("device token as admin token: %d", r.Status)
	}
	r := s.admin(t, http.MethodPut, "/devices/gen-1", `{"inputs":[{"name":"t","entity":"e"}]}`)
	tok, _ := r.Body["accessToken"].(string)
	if r.Status != 200 || len(tok) < 32 || r.Body["connectionType"] != "API" {
		t.Fatalf("PUT without token: %d %s", r.Status, r.Raw)
	}
	in := r.Body["inputs"].([]any)[0].(map[string]any)
	if in["entityInput"] != "t" {
		t.Errorf("entityInput default = %v, want the input name", in["entityInput"])
	}
	if g := s.admin(t, http.MethodGet, "/devices/gen-1", ""); g.Status != 200 || g.Body["accessToken"] != nil || strings.Contains(string(g.Raw), tok) {
		t.Errorf("GET shows the token: %d %s", g.Status, g.Raw)
	}
	if g := s.admin(t, http.MethodPost, "/devices/gen-1/tokens/token-1/reveal", ""); g.Status != 200 || g.Body["token"] != tok {
		t.Errorf("reveal = %d %s", g.Status, g.Raw)
	}
	if b := s.admin(t, http.MethodPut, "/devices/bad", `{"connectionType":"SERIAL"}`); b.Status != 400 || b.Body["success"] != false {
		t.Errorf("bad connection type: %d %s", b.Status, b.Raw)
	}
	if b := s.admin(t, http.MethodPut, "/devices/bad", `{"inputs":[{"name":"a"},{"name":"a"}]}`); b.Status != 400 {
		t.Errorf("duplicate inputs: %d %s", b.Status, b.Raw)
	}
	// The change serves at once on this instance.
	expect(t, s.post(t, `{"serial":"gen-1","data":{"t":1}}`, bearer(tok)), 200, "Message processed and data stored successfully", "")
	if d := s.admin(t, http.MethodDelete, "/devices/gen-1", ""); d.Status != 204 {
		t.Fatalf("DELETE = %d %s", d.Status, d.Raw)
	}
	expect(t, s.post(t, `{"serial":"gen-1","data":{"t":1}}`, bearer(tok)), 404, "Device not found", "Device with serial gen-1 not found")
	if g := s.admin(t, http.MethodGet, "/devices/gen-1", ""); g.Status != 404 {
		t.Errorf("GET after delete = %d", g.Status)
	}
	if d := s.admin(t, http.MethodDelete, "/devices/gen-1", ""); d.Status != 404 {
		t.Errorf("second DELETE = %d", d.Status)
	}
	if b := s.admin(t, http.MethodGet, "/entities/boiler-1/inputs/temperature/series?from=yesterday", ""); b.Status != 400 {
		t.Errorf("bad from = %d", b.Status)
	}
}
