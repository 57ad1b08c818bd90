package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// With -mixed, half the requests carry a key, and the two kinds'
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
	plain, keyed := &r.split[0], &r.split[1]
	if r.confirmed != 200 || plain.sent != 100 || plain.confirmed != 100 || keyed.sent != 100 || keyed.confirmed != 100 {
		t.Fatalf("confirmed %d, split %+v", r.confirmed, r.split)
	}
	if p50 := keyed.pct(50); p50 < 30 {
		t.Errorf("keyed p50 %.2f ms, want at least the server's 30 ms", p50)
	}
	if p50 := plain.pct(50); p50 >= 30 {
		t.Errorf("unkeyed p50 %.2f ms: keyed requests counted there", p50)
	}
}

// In a mixed load each device sends keyed and unkeyed requests in turn, and
// neighbouring devices differ in each round of the fleet.
func TestMixedLoadAlternatesEachDevice(t *testing.T) {
	for _, devices := range []int{1, 4, 5} {
		b := &bench{cfg: config{mixed: true, openConns: 1}, service: target{reqs: make([][]byte, devices)}}
		l := b.fleetLoad("k")
		for i := devices; i < 4*devices; i++ {
			if l.keyed(i) == l.keyed(i-devices) {
				t.Fatalf("%d devices: request %d of device %d is keyed=%v, as the one before it", devices, i, i%devices, l.keyed(i))
			}
		}
		if devices > 1 && l.keyed(0) == l.keyed(1) {
			t.Errorf("%d devices: the first two requests of a round are of one kind", devices)
		}
	}
}
