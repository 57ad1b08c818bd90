package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// oddSerials carry every character that means something in a URL, and
// some that are not ASCII; "100%25" is meant literally.
var oddSerials = []string{
	"AA:BB:CC:DD:EE:FF",
	"site/7/pump",
	"ops@plant+1,2;k=v&x$y%z 1",
	"Kühlhaus-東京-№5",
	"100%25",
}

// uriComponent encodes as the console's encodeURIComponent does.
func uriComponent(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// TestOddSerialsAndNames: a device whose serial, input, entity and entity
// input carry reserved URL characters is created through the workspace API
// at its escaped serial, the device posts under the serial itself and is
// stored, and every read route finds the values under the escaped names.
func TestOddSerialsAndNames(t *testing.T) {
	s := startStack(t)
	t.Run("two listeners", func(t *testing.T) { testTwoListeners(t, s) })
	from := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	for i, name := range oddSerials {
		enc, tok := uriComponent(name), fmt.Sprintf("odd-token-%d-5f1c2a9e", i)
		body := fmt.Sprintf(`{"accessToken":%q,"inputs":[{"name":%q,"entity":%q,"entityInput":%q}]}`, tok, name, "e "+name, "i "+name)
		if r := s.admin(t, http.MethodPut, "/devices/"+enc, body); r.Status != 200 || r.Body["serial"] != name {
			t.Fatalf("PUT /devices/%s: %d %s", enc, r.Status, r.Raw)
		}
		post := fmt.Sprintf(`{"serial":%q,"data":{%q:%d}}`, name, name, 40+i)
		expect(t, s.post(t, post, bearer(tok)), 200, "Message processed and data stored successfully", "")

		values := "/entities/" + uriComponent("e "+name) + "/inputs/" + uriComponent("i "+name)
		latest := s.admin(t, http.MethodGet, values+"/latest", "")
		if latest.Status != 200 || latest.Body["value"] != float64(40+i) || latest.Body["serial"] != name ||
			latest.Body["entity"] != "e "+name || latest.Body["input"] != "i "+name {
			t.Fatalf("latest of %q: %d %s", name, latest.Status, latest.Raw)
		}
		series := s.admin(t, http.MethodGet, values+"/series?from="+url.QueryEscape(from), "")
		if pts, _ := series.Body["points"].([]any); series.Status != 200 || len(pts) != 1 {
			t.Fatalf("series of %q: %d %s", name, series.Status, series.Raw)
		}
		eventually(t, 10*time.Second, func() bool {
			msgs := s.admin(t, http.MethodGet, "/devices/"+enc+"/messages", "")
			list, _ := msgs.Body["messages"].([]any)
			return msgs.Status == 200 && len(list) == 1
		})
		for _, path := range []string{"/diagnostics", "/backfills"} {
			if r := s.admin(t, http.MethodGet, "/devices/"+enc+path, ""); r.Status != 200 {
				t.Fatalf("GET %s of %q: %d %s", path, name, r.Status, r.Raw)
			}
		}
	}
	// Deleted at its escaped serial, the device is gone for the device too.
	name := oddSerials[0]
	if r := s.admin(t, http.MethodDelete, "/devices/"+uriComponent(name), ""); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.Status, r.Raw)
	}
	eventually(t, 10*time.Second, func() bool {
		return s.post(t, fmt.Sprintf(`{"serial":%q,"data":{}}`, name), bearer("odd-token-0-5f1c2a9e")).Status == http.StatusNotFound
	})
}

// testTwoListeners: the device port answers the device endpoints and its
// own document, and not the workspace API or the console; the workspace
// listener answers those, and not the device endpoints.
func testTwoListeners(t *testing.T, s *stack) {
	adm := bearer(adminToken)
	for _, c := range []struct {
		base, method, path string
		status             int
	}{
		{s.base, http.MethodGet, "/api/v1/admin/whoami", 404},
		{s.base, http.MethodPut, "/api/v1/admin/devices/x", 404},
		{s.base, http.MethodGet, "/console/devices", 404},
		{s.ws, http.MethodGet, "/api/v1/admin/whoami", 200},
		{s.ws, http.MethodPost, "/api/v1/deviceapi/event", 404},
	} {
		if r := s.doOn(t, c.base, c.method, c.path, nil, adm); r.Status != c.status {
			t.Errorf("%s %s%s = %d, want %d: %s", c.method, c.base, c.path, r.Status, c.status, r.Raw)
		}
	}
	doc := s.do(t, http.MethodGet, docPath, nil, nil)
	if doc.Status != 200 || strings.Contains(string(doc.Raw), "/api/v1/admin") {
		t.Errorf("the device port's document: %d, naming the workspace API: %v", doc.Status, strings.Contains(string(doc.Raw), "/api/v1/admin"))
	}
	resp, err := s.http.Get(s.ws + "/console/devices")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the console on the workspace listener: %d", resp.StatusCode)
	}
}
