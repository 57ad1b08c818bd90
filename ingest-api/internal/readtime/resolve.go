package readtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// MaxFuture is how far ahead of its receive time a reading's time may be:
// device clocks drift by minutes, not more.
const MaxFuture = 5 * time.Minute

// Bounds are how far from the receive time a reading's time may lie.
type Bounds struct {
	// MaxAge is how old a reading may be (MAX_READING_AGE); how far ahead
	// it may be is MaxFuture.
	MaxAge time.Duration
}

// Source is one candidate for a reading's time: where it came from (for the
// note) and its JSON value (nil or null: absent).
type Source struct {
	Name  string
	Value json.RawMessage
}

// Resolve returns the reading's time in epoch ns: the first source present
// (the request's ts, then the device's timestamp input), else the receive
// time. A present time that cannot be read or lies outside the bounds is
// replaced by the receive time, and note says why; otherwise note is empty.
func (b Bounds) Resolve(received time.Time, sources ...Source) (ns int64, note string) {
	for _, s := range sources {
		v := bytes.TrimSpace(s.Value)
		if len(v) == 0 || string(v) == "null" {
			continue
		}
		t, err := FromJSON(v)
		switch {
		case err != nil:
			return received.UnixNano(), s.Name + " is not a time: stored at receive time"
		case t.Before(received.Add(-b.MaxAge)):
			return received.UnixNano(), fmt.Sprintf("%s is older than MAX_READING_AGE (%s): stored at receive time", s.Name, b.MaxAge)
		case t.After(received.Add(MaxFuture)):
			return received.UnixNano(), fmt.Sprintf("%s is more than %s ahead of the receive time: stored at receive time", s.Name, MaxFuture)
		}
		return t.UnixNano(), ""
	}
	return received.UnixNano(), ""
}

// maxMs bounds epoch milliseconds to what nanoseconds in an int64 hold
// (the years 1678 to 2262).
const maxMs = math.MaxInt64 / int64(time.Millisecond)

// FromJSON reads a JSON value as a time: a number is Unix epoch
// milliseconds (a fraction counts), a string is read by Parse.
func FromJSON(v json.RawMessage) (time.Time, error) {
	if len(v) == 0 {
		return time.Time{}, ErrSyntax
	}
	switch c := v[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return time.Time{}, ErrSyntax
		}
		return Parse(s)
	case c == '-' || (c >= '0' && c <= '9'):
		if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			if ms > maxMs || ms < -maxMs {
				return time.Time{}, ErrSyntax
			}
			return time.Unix(0, ms*int64(time.Millisecond)).UTC(), nil
		}
		if ns, ok := decimalMs(string(v)); ok {
			return time.Unix(0, ns).UTC(), nil
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsNaN(f) || f > float64(maxMs) || f < -float64(maxMs) {
			return time.Time{}, ErrSyntax
		}
		return time.Unix(0, int64(math.Round(f*float64(time.Millisecond)))).UTC(), nil
	}
	return time.Time{}, ErrSyntax
}

// decimalMs reads "<ms>.<fraction>" exactly (no float rounding), to the
// nanosecond; false for any other form (exponents go through ParseFloat).
func decimalMs(s string) (int64, bool) {
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || frac == "" || strings.ContainsAny(frac, "eE+-") {
		return 0, false
	}
	ms, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || ms > maxMs-1 || ms < -maxMs+1 {
		return 0, false
	}
	if len(frac) > 6 {
		frac = frac[:6] // below a nanosecond
	}
	sub, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	if err != nil {
		return 0, false
	}
	if strings.HasPrefix(whole, "-") {
		sub = -sub
	}
	return ms*int64(time.Millisecond) + sub, true
}
