package devicesdk

import (
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    string
		d    time.Duration
		isOK bool
	}{
		{"", 0, false},
		{"120", 2 * time.Minute, true},
		{" 7 ", 7 * time.Second, true},
		{"3600", time.Hour, true},
		{"86400", time.Hour, true},
		{"99999999999999999999", 0, false},
		{"Thu, 26 Nov 2026 12:05:00 GMT", 5 * time.Minute, true},
		{"Thu, 26 Nov 2026 11:00:00 GMT", 0, true},
		{"Fri, 27 Nov 2026 12:00:00 GMT", time.Hour, true},
		{"-5", 0, false},
		{"soon", 0, false},
	} {
		d, ok := retryAfter(c.h, now)
		if d != c.d || ok != c.isOK {
			t.Errorf("%q: %v %v, want %v %v", c.h, d, ok, c.d, c.isOK)
		}
	}
}

// The back-off doubles its ceiling up to the maximum, draws below it, and
// shrinks one step only after three successes in a row.
func TestBackoffShrinksOnlyWhenCalm(t *testing.T) {
	b := newBackoff(time.Second, 10*time.Second)
	b.random = func() float64 { return 0.999999 }
	var got []time.Duration
	for range 6 {
		got = append(got, b.failed().Round(time.Second))
	}
	if want := []time.Duration{1, 2, 4, 8, 10, 10}; !durations(got, want) {
		t.Fatalf("ceilings %v", got)
	}
	b.succeeded()
	b.succeeded()
	if d := b.failed().Round(time.Second); d != 10*time.Second {
		t.Fatalf("two successes and a failure: %v, want the ceiling kept", d)
	}
	for range 6 {
		b.succeeded()
	}
	if d := b.failed().Round(time.Second); d != 4*time.Second || b.level != 3 {
		t.Fatalf("after six calm successes (two steps down): %v (level %d), want 4s", d, b.level)
	}
	b.random = func() float64 { return 0 }
	if d := b.failed(); d != 0 {
		t.Fatalf("full jitter draws from 0: %v", d)
	}
}

func durations(got []time.Duration, want []time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i]*time.Second {
			return false
		}
	}
	return true
}
