package batch

import (
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	ms := time.Millisecond
	p := pacer{min: 10 * ms, per: 500 * time.Microsecond, max: 25 * ms}
	t0 := time.Unix(1000, 0)
	if ok, _ := p.due(t0, 1); !ok {
		t.Fatal("an idle writer waits")
	}
	p.started(t0, 100)
	for _, tc := range []struct {
		name    string
		at      time.Duration
		pending int
		due     bool
		wait    time.Duration
	}{
		{"never before the floor, however many wait", 5 * ms, 500, false, 5 * ms},
		{"as many as last time are back: at once", 12 * ms, 100, true, 0},
		{"fewer: until the paced time", 12 * ms, 60, false, 13 * ms},
		{"paced time reached", 25 * ms, 1, true, 0},
	} {
		ok, wait := p.due(t0.Add(tc.at), tc.pending)
		if ok != tc.due || wait != tc.wait {
			t.Errorf("%s: due %v wait %v, want %v %v", tc.name, ok, wait, tc.due, tc.wait)
		}
	}
	// A small batch: the floor is the paced time.
	p.started(t0, 4)
	if ok, wait := p.due(t0.Add(3*ms), 1); ok || wait != 7*ms {
		t.Errorf("small batch: due %v wait %v", ok, wait)
	}
	if ok, _ := p.due(t0.Add(10*ms), 1); !ok {
		t.Error("small batch: not due at the floor")
	}
}
