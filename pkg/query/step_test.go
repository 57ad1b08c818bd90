package query

import "testing"

func TestStepFor(t *testing.T) {
	const week = 7 * 86400e3
	from := int64(1763000000123)
	for _, tc := range []struct {
		span int64
		n    int
		want string
	}{
		{15 * 60e3, 300, "5s"}, // 15 min in 300 buckets: 180 of 5 s (3 s would give 301)
		{3600e3, 720, "10s"},   // 1 h: 5 s would need 721 buckets, unaligned
		{86400e3, 1000, "2m"},  // 24 h
		{week, 1000, "15m"},    // 7 d: 672 (+1) buckets
		{week, 1, "56d"},       // past the list, doubling until one aligned bucket holds it
		{1, 10000, "1ms"},
	} {
		got := StepFor(from, from+tc.span, tc.n)
		if FormatStep(got) != tc.want {
			t.Errorf("StepFor(span %d, %d) = %s, want %s", tc.span, tc.n, FormatStep(got), tc.want)
		}
		if c := BucketCount(from, from+tc.span, got); c > int64(tc.n) {
			t.Errorf("StepFor(span %d, %d) gives %d buckets", tc.span, tc.n, c)
		}
	}
	if c := BucketCount(-1, 0, 1000); c != 2 {
		t.Errorf("BucketCount across the epoch = %d, want 2", c)
	}
}

func TestParseAndFormatStep(t *testing.T) {
	for in, want := range map[string]int64{"250ms": 250, "30s": 30e3, "1h30m": 5400e3, "1d": 86400e3, "7d": 7 * 86400e3} {
		got, err := ParseStep(in)
		if err != nil || got != want {
			t.Errorf("ParseStep(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0s", "1us", "-5m", "d", "1.5d", "0d", "x"} {
		if _, err := ParseStep(bad); err == nil {
			t.Errorf("ParseStep(%q) accepted", bad)
		}
	}
	for ms, want := range map[int64]string{250: "250ms", 1500: "1500ms", 30e3: "30s", 5400e3: "90m", 86400e3: "1d", 3600e3: "1h"} {
		if got := FormatStep(ms); got != want {
			t.Errorf("FormatStep(%d) = %s, want %s", ms, got, want)
		}
	}
}
