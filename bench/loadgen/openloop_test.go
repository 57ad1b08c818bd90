package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// With -mixed, every other request carries a key, and the two kinds'
// latencies are counted apart: a server that answers keyed requests 30 ms
// late shows it in the keyed half only.
func TestMixedLoadSplitsTheLatencies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") != "" {
			time.Sleep(30 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"message":"ok"}`))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	b := &bench{cfg: config{mixed: true, openConns: 64}, runID: "r1",
		service: target{host: host, reqs: [][]byte{request(host, "/api/v1/deviceapi/event", "t", []byte(`{}`))}}}
	r, err := driveOpen(context.Background(), b.fleetLoad(b.keyPrefix("%s-open-%d", 200)), 200, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	plain, keyed := r.split[0], r.split[1]
	if r.confirmed != 200 || plain == nil || keyed == nil || plain.TotalCount() != 100 || keyed.TotalCount() != 100 {
		t.Fatalf("confirmed %d, split %v", r.confirmed, r.split)
	}
	if p50 := keyed.ValueAtQuantile(50); p50 < 30_000 {
		t.Errorf("keyed p50 %d µs, want at least the server's 30 ms", p50)
	}
	if p50 := plain.ValueAtQuantile(50); p50 >= 30_000 {
		t.Errorf("unkeyed p50 %d µs: keyed requests counted there", p50)
	}
}
