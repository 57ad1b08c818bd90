package devicesdk

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps a Retry-After the service sends.
const MaxRetryAfter = time.Hour

// backoff is exponential back-off with full jitter that shrinks one step
// only after calm successes in a row, so that a brief success in an
// outage does not start a storm of attempts.
type backoff struct {
	base, max time.Duration
	calm      int
	level     int
	successes int
	random    func() float64 // in [0, 1)
}

func newBackoff(base, max time.Duration) *backoff {
	return &backoff{base: base, max: max, calm: 3, random: rand.Float64}
}

// failed returns how long to wait after a failure.
func (b *backoff) failed() time.Duration {
	b.successes = 0
	ceiling := b.max
	if b.level < 62 && b.base<<b.level > 0 && b.base<<b.level < b.max {
		ceiling = b.base << b.level
		b.level++
	}
	return time.Duration(b.random() * float64(ceiling))
}

// succeeded counts a success.
func (b *backoff) succeeded() {
	if b.successes++; b.successes >= b.calm {
		b.successes = 0
		b.level = max(b.level-1, 0)
	}
}

// retryAfter reads a Retry-After header, in seconds or as an HTTP date,
// capped at MaxRetryAfter; ok is false when there is none or it is not
// one of those.
func retryAfter(h string, now time.Time) (d time.Duration, ok bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(h, 10, 64); err == nil {
		if n > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}
