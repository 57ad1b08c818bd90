package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A stall shows in the second whose requests it held up, not spread over the
// level: the server holds every request that arrives from 1.1 s to 1.9 s
// into the level until 1.9 s.
func TestTimelineShowsTheSecondAStallHeldUp(t *testing.T) {
	var stallFrom, stallTo time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if now := time.Now(); now.After(stallFrom) && now.Before(stallTo) {
			time.Sleep(time.Until(stallTo))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"success":true,"message":"ok"}`))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	b := &bench{cfg: config{openConns: 256}, service: target{host: host, reqs: [][]byte{request(host, "/api/v1/deviceapi/event", "t", []byte(`{}`))}}}
	load := b.fleetLoad("")
	load.timeline = true
	// driveOpen's first request is due 20 ms after it starts.
	begin := time.Now().Add(20 * time.Millisecond)
	stallFrom, stallTo = begin.Add(1100*time.Millisecond), begin.Add(1900*time.Millisecond)
	r, err := driveOpen(context.Background(), load, 100, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.seconds) != 3 {
		t.Fatalf("%d seconds, want 3", len(r.seconds))
	}
	for i, s := range r.seconds {
		if s.sent != 100 || s.confirmed != 100 || s.refused != 0 || s.failed != 0 {
			t.Fatalf("second %d: %+v, want 100 due and confirmed", i, s)
		}
	}
	maxMs := func(i int) float64 { return float64(r.seconds[i].hist.Max()) / 1000 }
	if maxMs(1) < 650 {
		t.Errorf("second 1's slowest answer %.1f ms, want the stall's ~800 ms", maxMs(1))
	}
	for _, i := range []int{0, 2} {
		if maxMs(i) > maxMs(1)-450 {
			t.Errorf("second %d's slowest answer %.1f ms, not clearly below the stalled second's %.1f ms", i, maxMs(i), maxMs(1))
		}
	}
}

// Each second's CPU is the difference of the cumulative times at its two
// ends, interpolated between samples, in % of one core.
func TestCPUOverInterpolatesTheSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	samples := []cpuSample{
		{at: t0, cpu: map[string]float64{"api": 10, "nats": 5}},
		{at: t0.Add(500 * time.Millisecond), cpu: map[string]float64{"api": 10.5, "nats": 5}},
		{at: t0.Add(1500 * time.Millisecond), cpu: map[string]float64{"api": 10.7, "nats": 5.2}},
	}
	got := cpuOver(samples, t0.Add(250*time.Millisecond), t0.Add(1250*time.Millisecond))
	// api: 10.25 -> 10.65 over 1 s: 40%; nats: 5 -> 5.15: 15%.
	if len(got) != 2 || abs(got["api"]-40) > 1e-6 || abs(got["nats"]-15) > 1e-6 {
		t.Errorf("cpuOver = %v, want api=40 nats=15", got)
	}
	// A span that starts on a sample and ends on another reads them as
	// they are: api 10 -> 10.7 over 1.5 s.
	if got := cpuOver(samples, t0, t0.Add(1500*time.Millisecond)); abs(got["api"]-100*0.7/1.5) > 1e-6 {
		t.Errorf("cpuOver on the samples' own instants = %v, want api=%.3f", got, 100*0.7/1.5)
	}
	if got := cpuOver(samples, t0.Add(time.Second), t0.Add(2*time.Second)); got != nil {
		t.Errorf("a span past the last sample gave %v, want nil", got)
	}
	if got := cpuOver(samples, t0.Add(-time.Second), t0.Add(time.Second)); got != nil {
		t.Errorf("a span before the first sample gave %v, want nil", got)
	}
}

// A timeline holds a histogram per second until the level ends: its
// levels are bounded.
func TestTimelineBoundsTheLevel(t *testing.T) {
	_, err := parseFlags([]string{"-admin-token", "x", "-rates", "100", "-timeline", "-duration", "1h"})
	if err == nil || !strings.Contains(err.Error(), "-timeline") {
		t.Errorf("-timeline with -duration 1h: %v, want refused", err)
	}
	if _, err := parseFlags([]string{"-admin-token", "x", "-rates", "100", "-timeline", "-duration", "60s"}); err != nil {
		t.Errorf("-timeline with -duration 60s: %v", err)
	}
}

func abs(f float64) float64 { return max(f, -f) }
