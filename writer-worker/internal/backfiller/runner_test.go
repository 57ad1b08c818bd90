package backfiller

import (
	"testing"
	"time"
)

func TestPause(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		took     time.Duration
		readings int64
		live     uint64
		want     time.Duration
	}{
		{100 * ms, 10_000, 0, 100 * ms},     // idle: as long again as the page took
		{100 * ms, 10_000, 1, 100 * ms},     // a trickle is not load
		{100 * ms, 10_000, 200, 300 * ms},   // live at 2,000/s: 25,000 readings/s, 400 ms a page
		{100 * ms, 1_000, 200, 100 * ms},    // a small page under load: the duty still holds
		{500 * ms, 10_000, 1_000, 500 * ms}, // a slow page: its own length again is longer
		{10 * ms, 0, 100, 10 * ms},          // nothing stored
		{time.Second, 50_000, 5_000, 1 * time.Second},
	} {
		if got := pause(c.took, c.readings, c.live); got != c.want {
			t.Errorf("pause(%v, %d, %d) = %v, want %v", c.took, c.readings, c.live, got, c.want)
		}
	}
}
