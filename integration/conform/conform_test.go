package conform

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

func TestConformCatchesWhatTheDocumentForbids(t *testing.T) {
	doc, err := os.ReadFile("../../ingest-api/internal/openapi/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	retry := http.Header{"Retry-After": []string{"1"}}
	for _, tc := range []struct {
		name, method, path string
		status             int
		header             http.Header
		body, wantErr      string
	}{
		{"stored", "POST", "/api/v1/deviceapi/event", 200, nil, `{"success":true,"message":"Message processed and data stored successfully"}`, ""},
		{"rejection", "POST", "/api/v1/deviceapi/event", 401, nil, `{"success":false,"message":"Invalid access token","error":"x"}`, ""},
		{"message missing", "POST", "/api/v1/deviceapi/event", 200, nil, `{"success":true}`, `required "message" missing`},
		{"extra field", "POST", "/api/v1/deviceapi/event", 400, nil, `{"success":false,"message":"m","code":7}`, `undocumented field "code"`},
		{"wrong type", "POST", "/api/v1/deviceapi/event", 400, nil, `{"success":"no","message":"m"}`, "want a boolean"},
		{"undocumented status", "POST", "/api/v1/deviceapi/event", 418, nil, `{}`, "status 418 is not documented"},
		{"503 without Retry-After", "POST", "/api/v1/deviceapi/event", 503, nil, `{"success":false,"message":"m"}`, "header Retry-After missing"},
		{"503 with Retry-After", "POST", "/api/v1/deviceapi/event", 503, retry, `{"success":false,"message":"m"}`, ""},
		{"device", "GET", "/api/v1/admin/devices/d1", 200, nil, `{"serial":"d1","connectionType":"API","tokens":[{"name":"token-1","primary":true,"created":"2026-11-25T04:33:23Z"}],"inputs":[{"name":"t","entity":"e","entityInput":"t"}]}`, ""},
		{"device bad enum", "GET", "/api/v1/admin/devices/d1", 200, nil, `{"serial":"d1","connectionType":"LoRa","tokens":[],"inputs":[]}`, "is not one of"},
		{"nested item", "GET", "/api/v1/admin/devices/d1/messages", 200, nil, `{"messages":[{"eventId":"e","receivedAt":"t","readingTime":"t","payload":{},"outcome":1}]}`, "messages[0].outcome: want a string"},
		{"204 has no body", "DELETE", "/api/v1/admin/devices/d1", 204, nil, ``, ""},
		{"204 with a body", "DELETE", "/api/v1/admin/devices/d1", 204, nil, `{}`, "documented without a body"},
		{"unknown path", "GET", "/api/v2/x", 200, nil, `{}`, "is not documented"},
		{"unknown method", "PATCH", "/api/v1/admin/devices/d1", 200, nil, `{}`, "PATCH /api/v1/admin/devices/{serial} is not documented"},
	} {
		err := d.Conform(tc.method, tc.path, tc.status, tc.header, []byte(tc.body))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}
