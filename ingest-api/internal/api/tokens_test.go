package api

import (
	"strings"
	"testing"
)

// A device token an operator sets, by PUT or POST .../tokens, has at
// least 16 bytes: a shorter one is a 400 that says so, before the
// registry is touched. Leaving it out has one generated.
func TestOperatorSetTokensHaveAMinimumLength(t *testing.T) {
	e := testServer(t)
	adm := map[string]string{"Authorization": "Bearer adm"}
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/admin/devices/dev-1", `{"accessToken":"t","inputs":[]}`},
		{"PUT", "/api/v1/admin/devices/dev-1", `{"accessToken":"0123456789abcde","inputs":[]}`},
		{"POST", "/api/v1/admin/devices/dev-1/tokens", `{"token":"short-token"}`},
	} {
		status, b, _ := call(e, tc.method, tc.path, tc.body, adm)
		if status != 400 || b.Message != "Bad request" || b.Error != "a token must be at least 16 bytes (leave it out to have one generated)" {
			t.Errorf("%s %s %s: %d %+v, want 400 naming the minimum", tc.method, tc.path, tc.body, status, b)
		}
	}
	if _, err := decodeDevice(strings.NewReader(`{"accessToken":"0123456789abcdef","inputs":[]}`), "dev-1"); err != nil {
		t.Errorf("a 16-byte token is refused: %v", err)
	}
}
