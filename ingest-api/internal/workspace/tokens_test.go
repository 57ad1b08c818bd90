package workspace

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
)

// A device token an operator sets, by PUT or POST .../tokens, has at
// least 16 bytes: a shorter one is a 400 that says so, before the
// registry is touched. Leaving it out has one generated.
func TestOperatorSetTokensHaveAMinimumLength(t *testing.T) {
	e := testServer(t, zap.NewNop())
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/admin/devices/dev-1", `{"accessToken":"t","inputs":[]}`},
		{"PUT", "/api/v1/admin/devices/dev-1", `{"accessToken":"0123456789abcde","inputs":[]}`},
		{"POST", "/api/v1/admin/devices/dev-1/tokens", `{"token":"short-token"}`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer adm")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		var b edge.Body
		_ = json.Unmarshal(rec.Body.Bytes(), &b)
		if rec.Code != 400 || b.Message != "Bad request" || b.Error != "a token must be at least 16 bytes (leave it out to have one generated)" {
			t.Errorf("%s %s %s: %d %+v, want 400 naming the minimum", tc.method, tc.path, tc.body, rec.Code, b)
		}
	}
	if _, err := decodeDevice(strings.NewReader(`{"accessToken":"0123456789abcdef","inputs":[]}`), "dev-1"); err != nil {
		t.Errorf("a 16-byte token is refused: %v", err)
	}
}
