package readtime

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2026-11-22t10:11:12.345z", utc("2026-11-22T10:11:12.345Z")}, // a field client's form
		{"2026-11-22T10:11:12.345Z", utc("2026-11-22T10:11:12.345Z")},
		{"2026-11-22T10:11:12Z", utc("2026-11-22T10:11:12Z")},
		{"2026-11-22T10:11:12", utc("2026-11-22T10:11:12Z")}, // no zone: UTC
		{"2026-11-22T10:11:12.5", utc("2026-11-22T10:11:12.5Z")},
		{"2026-11-22T10:11:12,25Z", utc("2026-11-22T10:11:12.25Z")},
		{"2026-11-22T10:11:12.123456789+01:00", utc("2026-11-22T09:11:12.123456789Z")},
		{"2026-11-22T10:11:12-0530", utc("2026-11-22T15:41:12Z")},
		{"2024-02-29T00:00:00Z", utc("2024-02-29T00:00:00Z")},
		{"2026-11-22T10:11:12.1234567899Z", utc("2026-11-22T10:11:12.123456789Z")},
	} {
		got, err := Parse(c.in)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"", "2026-11-22", "2026-11-22 10:11:12Z", "2026-11-22T10:11Z", "2026-13-01T00:00:00Z",
		"2025-02-29T00:00:00Z", "2026-11-22T24:00:00Z", "2026-11-22T10:11:60Z", "2026-11-22T10:11:12.Z",
		"2026-11-22T10:11:12+24:00", "2026-11-22T10:11:12+01", "2026-11-22T10:11:12ZZ",
		"+2026-11-22T10:11:12Z", "2026-1a-22T10:11:12Z", "1795360410583",
	} {
		if v, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, v)
		}
	}
}

func TestResolve(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	b := Bounds{MaxAge: 90 * 24 * time.Hour}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	dt := time.Date(2026, 11, 22, 10, 11, 12, 345e6, time.UTC)
	for _, c := range []struct {
		name    string
		sources []Source
		want    time.Time
		note    string
	}{
		{"nothing: receive time", nil, now, ""},
		{"the timestamp input", []Source{{"ts", nil}, {"data.datetime", raw(`"2026-11-22t10:11:12.345z"`)}}, dt, ""},
		{"ts first", []Source{{"ts", raw(fmt.Sprint(dt.UnixMilli()))}, {"data.datetime", raw(`"2026-11-22T11:00:00Z"`)}}, dt, ""},
		{"a null ts is absent", []Source{{"ts", raw(`null`)}, {"data.datetime", raw(`"2026-11-22T10:11:12.345Z"`)}}, dt, ""},
		{"fractional milliseconds", []Source{{"ts", raw(fmt.Sprint(dt.UnixMilli()) + ".5")}}, dt.Add(500 * time.Microsecond), ""},
		{"a bad ts is not replaced by the input", []Source{{"ts", raw(`"yesterday"`)}, {"data.datetime", raw(`"2026-11-22T10:11:12Z"`)}}, now,
			"ts is not a time: stored at receive time"},
		{"not a time", []Source{{"data.datetime", raw(`true`)}}, now, "data.datetime is not a time: stored at receive time"},
		{"too old", []Source{{"ts", raw(`"2026-08-01T00:00:00Z"`)}}, now, "ts is older than MAX_READING_AGE (2160h0m0s): stored at receive time"},
		{"too far ahead", []Source{{"ts", raw(`"2026-11-22T12:05:01Z"`)}}, now, "ts is more than 5m0s ahead of the receive time: stored at receive time"},
		{"just within ahead", []Source{{"ts", raw(`"2026-11-22T12:05:00Z"`)}}, now.Add(5 * time.Minute), ""},
		{"beyond int64 nanoseconds", []Source{{"ts", raw(`1e20`)}}, now, "ts is not a time: stored at receive time"},
	} {
		ns, note := b.Resolve(now, c.sources...)
		if ns != c.want.UnixNano() || note != c.note {
			t.Errorf("%s: %v %q, want %v %q", c.name, time.Unix(0, ns).UTC(), note, c.want, c.note)
		}
	}
}

// FuzzParse: never panics; where Go's RFC 3339 parser applies (upper-case
// T, zone Z or ±hh:mm) both agree; whatever Parse accepts is a time Go
// formats back to the same instant.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"2026-11-22t10:11:12.345z", "2026-11-22T10:11:12Z", "2026-11-22T10:11:12.123456789+01:00",
		"2026-11-22T10:11:12", "2026-11-22T10:11:12-0530", "2024-02-29T23:59:59,9Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999-23:59"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		// Go's parser also takes one-digit fields ("0:00:00") and an
		// offset of 24 hours or 60 minutes, which RFC 3339 does not: only the
		// fixed-width form with offsets within range is compared.
		applies := len(s) >= 20 && s[4] == '-' && s[7] == '-' && s[10] == 'T' && s[13] == ':' && s[16] == ':' && !strings.Contains(s, ",") && (s[len(s)-1] == 'Z' || (len(s) >= 25 && s[len(s)-3] == ':' && (s[len(s)-6] == '+' || s[len(s)-6] == '-')))
		if applies && s[len(s)-1] != 'Z' && (s[len(s)-5:len(s)-3] >= "24" || s[len(s)-2:] >= "60") {
			applies = false
		}
		if applies {
			want, gerr := time.Parse(time.RFC3339Nano, s)
			switch {
			case (err == nil) != (gerr == nil):
				t.Fatalf("Parse(%q) error %v, Go's RFC 3339: %v", s, err, gerr)
			case err == nil && !got.Equal(want):
				t.Fatalf("Parse(%q) = %v, Go's RFC 3339: %v", s, got, want)
			}
		}
		if err == nil && got.Year() >= 0 && got.Year() <= 9999 {
			back, perr := time.Parse(time.RFC3339Nano, got.Format(time.RFC3339Nano))
			if perr != nil || !back.Equal(got) {
				t.Fatalf("Parse(%q) = %v does not round-trip: %v", s, got, perr)
			}
		}
	})
}
