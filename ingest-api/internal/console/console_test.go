package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func TestHandler(t *testing.T) {
	h := newHandler(fstest.MapFS{
		"index.html":          {Data: []byte("<!doctype html><title>console</title>")},
		"assets/app-1a2b.js":  {Data: []byte("console.log(1)")},
		"assets/app-1a2b.css": {Data: []byte("body{}")},
		"secret-outside.txt":  {Data: []byte("no")},
	})
	for _, tc := range []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/console/", 200, "text/html; charset=utf-8", "<!doctype html>"},
		{"GET", "/console/devices/dev%2F1", 200, "text/html; charset=utf-8", "<!doctype html>"},
		{"GET", "/console/entities/boiler/inputs/temp", 200, "text/html; charset=utf-8", "<!doctype html>"},
		{"HEAD", "/console/devices", 200, "text/html; charset=utf-8", ""},
		{"GET", "/console/assets/app-1a2b.js", 200, "text/javascript; charset=utf-8", "console.log(1)"},
		{"GET", "/console/assets/app-1a2b.css", 200, "text/css; charset=utf-8", "body{}"},
		{"GET", "/console/assets/missing.js", 404, "text/plain; charset=utf-8", "no such asset"},
		{"GET", "/console/assets/../secret-outside.txt", 404, "text/plain; charset=utf-8", "no such asset"},
		{"POST", "/console/devices", 405, "text/plain; charset=utf-8", "method not allowed"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != tc.ctype || !strings.HasPrefix(rec.Body.String(), tc.body) {
			t.Errorf("%s %s = %d %q %q, want %d %q %q", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), tc.status, tc.ctype, tc.body)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
	}
	unbuilt := newHandler(fstest.MapFS{"README.md": {Data: []byte("x")}})
	rec := httptest.NewRecorder()
	unbuilt.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "console not built") {
		t.Errorf("unbuilt console: %d %q", rec.Code, rec.Body.String())
	}
}
