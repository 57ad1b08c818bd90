package query

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// BucketCount is how many buckets of stepMs, aligned to the epoch, the
// range [fromMs, toMs] touches at most.
func BucketCount(fromMs, toMs, stepMs int64) int64 {
	return floorDiv(toMs, stepMs) - floorDiv(fromMs, stepMs) + 1
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// niceSteps are the bucket widths StepFor chooses from, in milliseconds:
// ones a reader of a chart recognises. Past the last, steps double.
var niceSteps = []int64{
	1, 2, 5, 10, 20, 50, 100, 200, 500,
	1e3, 2e3, 5e3, 10e3, 15e3, 30e3,
	60e3, 2 * 60e3, 5 * 60e3, 10 * 60e3, 15 * 60e3, 30 * 60e3,
	3600e3, 2 * 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3,
	86400e3, 2 * 86400e3, 7 * 86400e3,
}

// StepFor is the smallest recognisable step that cuts [fromMs, toMs] into
// at most n buckets (n >= 1).
func StepFor(fromMs, toMs int64, n int) int64 {
	for _, s := range niceSteps {
		if BucketCount(fromMs, toMs, s) <= int64(n) {
			return s
		}
	}
	s := niceSteps[len(niceSteps)-1]
	for BucketCount(fromMs, toMs, s) > int64(n) {
		s *= 2
	}
	return s
}

// ParseStep reads a step: a Go duration ("90s", "1h30m", "250ms") or a
// whole number of days ("1d", "7d"), at least 1 ms.
func ParseStep(v string) (int64, error) {
	var ms int64
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 1 || n > 36500 {
			return 0, errors.New("step must be a duration such as 30s, 5m, 1h or 1d")
		}
		ms = n * 86400e3
	} else {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, errors.New("step must be a duration such as 30s, 5m, 1h or 1d")
		}
		ms = d.Milliseconds()
	}
	if ms < 1 {
		return 0, errors.New("step must be at least 1ms")
	}
	return ms, nil
}

// FormatStep renders a step in its largest whole unit: 1d, 6h, 5m, 15s,
// 250ms.
func FormatStep(ms int64) string {
	for _, u := range []struct {
		ms   int64
		name string
	}{{86400e3, "d"}, {3600e3, "h"}, {60e3, "m"}, {1e3, "s"}} {
		if ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
