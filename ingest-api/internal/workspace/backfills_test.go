package workspace

import (
	"testing"
	"time"
)

func TestBackfillRange(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		from, to         string
		wantFrom, wantTo time.Time
		ok               bool
	}{
		{"2026-11-24T12:00:00Z", "", now.Add(-24 * time.Hour), now, true},
		{"2026-11-24T12:00:00Z", "2026-11-25T00:00:00.5Z", now.Add(-24 * time.Hour), now.Add(-12*time.Hour + 500*time.Millisecond), true},
		{"2026-11-24T12:00:00+01:00", "2027-01-01T00:00:00Z", now.Add(-25 * time.Hour), now, true}, // a later to is now
		{"", "", time.Time{}, time.Time{}, false},
		{"yesterday", "", time.Time{}, time.Time{}, false},
		{"2026-11-24T12:00:00Z", "soon", time.Time{}, time.Time{}, false},
		{"2026-11-25T13:00:00Z", "", time.Time{}, time.Time{}, false},                     // from after now
		{"2026-11-24T12:00:00Z", "2026-11-24T12:00:00Z", time.Time{}, time.Time{}, false}, // empty
		{"1700000000000", "", time.Time{}, time.Time{}, false},
	} {
		from, to, err := backfillRange(c.from, c.to, now)
		if (err == nil) != c.ok || c.ok && (!from.Equal(c.wantFrom) || !to.Equal(c.wantTo)) {
			t.Errorf("%q..%q: %v..%v, %v; want %v..%v ok=%v", c.from, c.to, from, to, err, c.wantFrom, c.wantTo, c.ok)
		}
	}
}
