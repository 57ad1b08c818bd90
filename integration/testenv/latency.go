package testenv

import (
	"slices"
	"testing"
	"time"
)

// ReportLatency reports the median and 99th percentile of took, each
// operation's time, as the project's benchmarks name them (p50_ms,
// p99_ms). It sorts took.
func ReportLatency(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(took[len(took)/2]), "p50_ms")
	b.ReportMetric(ms(took[len(took)*99/100]), "p99_ms")
}
