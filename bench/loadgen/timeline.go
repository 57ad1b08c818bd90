package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// second is one second of an open-loop level with -timeline: the requests
// due in it and what they got (latency counted from each one's due time, so
// a stall shows in the second whose requests it held up), and each sampled
// process's CPU over that second of wall time.
type second struct {
	kind                               // sent: the requests due in it; hist: its confirmed answers' latencies
	refused, failed int                // refused: answered, not success
	cpu             map[string]float64 // % of one core
}

// recordSecond counts request i's answer again in its due second. The
// caller holds no lock; r.seconds was sized by driveOpen before sending.
func (r *result) recordSecond(sec int, a reply, err error, lat time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.seconds[sec]
	s.sent++
	switch {
	case err != nil:
		s.failed++
	case !a.ok:
		s.refused++
	default:
		s.confirmed++
		if s.hist == nil {
			// 2 significant digits (1%): a second's percentiles need no
			// more, and each histogram stays ~20 KiB (-timeline bounds
			// the level to maxTimeline).
			s.hist = hdrhistogram.New(1, 120_000_000, 2)
		}
		_ = s.hist.RecordValue(max(1, lat.Microseconds()))
	}
}

// maxTimeline is the longest level -timeline takes: a histogram per
// second is held until the level ends.
const maxTimeline = 15 * time.Minute

// cpuSample is each process's CPU time in seconds at one instant.
type cpuSample struct {
	at  time.Time
	cpu map[string]float64
}

// cpuOver is each process's CPU use between from and to, in % of one core,
// from samples (in time order) by linear interpolation of the cumulative
// times; nil if the samples do not cover the span.
func cpuOver(samples []cpuSample, from, to time.Time) map[string]float64 {
	a, okA := cpuAt(samples, from)
	b, okB := cpuAt(samples, to)
	if !okA || !okB || !to.After(from) {
		return nil
	}
	wall := to.Sub(from).Seconds()
	out := make(map[string]float64, len(a))
	for name := range a {
		out[name] = 100 * (b[name] - a[name]) / wall
	}
	return out
}

func cpuAt(samples []cpuSample, t time.Time) (map[string]float64, bool) {
	i, _ := slices.BinarySearchFunc(samples, t, func(s cpuSample, t time.Time) int { return s.at.Compare(t) })
	switch {
	case i < len(samples) && samples[i].at.Equal(t):
		return samples[i].cpu, true
	case i == 0 || i == len(samples):
		return nil, false
	}
	lo, hi := samples[i-1], samples[i]
	f := t.Sub(lo.at).Seconds() / hi.at.Sub(lo.at).Seconds()
	out := make(map[string]float64, len(lo.cpu))
	for name, v := range lo.cpu {
		out[name] = v + f*(hi.cpu[name]-v)
	}
	return out, true
}

// emitTimeline writes one line per second of an open-loop level.
func (b *bench) emitTimeline(rate int, l *result) {
	for i, s := range l.seconds {
		cpu := make([]string, 0, len(s.cpu))
		for _, n := range slices.Sorted(maps.Keys(s.cpu)) {
			cpu = append(cpu, fmt.Sprintf("%s=%.0f", n, s.cpu[n]))
		}
		b.emit("  second rate=%d s=%d due=%d confirmed=%d refused=%d failed=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f cpu_pct %s",
			rate, i, s.sent, s.confirmed, s.refused, s.failed, s.pct(50), s.pct(99), s.pct(100), strings.Join(cpu, " "))
	}
}
