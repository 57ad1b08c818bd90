package backfill

import (
	"testing"
	"time"
)

func TestViewProgress(t *testing.T) {
	from := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	to := from + int64(10*time.Hour)
	for _, c := range []struct {
		state    string
		cursorNs int64
		want     float64
	}{
		{Queued, 0, 0},
		{Running, from + int64(time.Hour), 0.1},
		{Running, from + int64(5*time.Hour), 0.5},
		{Cancelled, from + int64(5*time.Hour), 0.5},
		{Done, from + int64(2*time.Hour), 1}, // done: the rest of the range held no message
		{Running, to + 1, 1},
	} {
		v := Job{ID: "x", FromNs: from, ToNs: to, State: c.state, CursorNs: c.cursorNs}.View()
		if v.Progress != c.want || v.From != "2026-11-01T00:00:00.000Z" || v.Inputs == nil {
			t.Errorf("%s at %d: progress %v from %s inputs %v, want %v", c.state, c.cursorNs, v.Progress, v.From, v.Inputs, c.want)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{"Ab3": true, "": false, "a.b": false, "*": false, ">": false, "a b": false, string(make([]byte, 65)): false} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) = %v", id, !want)
		}
	}
}
