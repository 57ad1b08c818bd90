package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// result is what one level of load produced, closed or open loop; record is
// safe for the level's concurrent senders.
type result struct {
	mu               sync.Mutex // guards the answers' counts while the level runs
	sent, confirmed  int
	errors           int // connection errors: sent, no answer
	statuses         map[int]int
	hist             *hdrhistogram.Histogram // µs to each answer: from its send (closed loop) or its scheduled time (open loop)
	split            [2]kind                 // open loop, -mixed: the unkeyed [0] and keyed [1] requests apart
	scheduled, conns int                     // open loop: requests due, connections opened (at most -open-conns)
	elapsed          time.Duration
	start            time.Time // open loop: request 0's due time
	seconds          []second  // open loop, -timeline: each second's due requests

	// measured around the level (bench.measure)
	stored   int                // values ClickHouse holds from the level
	rss, cpu map[string]float64 // per process: peak MB, % of one core over sampled
	sampled  time.Duration
	growth   map[string][2]float64 // per process: RSS MB 5 s in and at the end
}

// target is a server to load and its requests, rendered for its host.
type target struct {
	host string
	reqs [][]byte
}

func newResult() *result {
	return &result{statuses: map[int]int{}, hist: hdrhistogram.New(1, 120_000_000, 3)}
}

// record counts one request sent: its answer a, lat after the latency's
// start, or, with err, no answer.
func (r *result) record(a reply, err error, lat time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent++
	if err != nil {
		r.errors++
		return
	}
	_ = r.hist.RecordValue(max(1, lat.Microseconds()))
	r.statuses[a.status]++
	if a.ok {
		r.confirmed++
	}
}

// kind is one kind of request's answers in a mixed load: how many were
// sent and confirmed, and the confirmed ones' latencies (a refusal, quick
// or slow, would blur them).
type kind struct {
	sent, confirmed int
	hist            *hdrhistogram.Histogram
}

// recordSplit counts a request again as its kind, split[1] if keyed: its
// answer a after lat, or, with failed, none.
func (r *result) recordSplit(keyed bool, a reply, failed bool, lat time.Duration) {
	k := &r.split[0]
	if keyed {
		k = &r.split[1]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k.sent++
	if failed || !a.ok {
		return
	}
	k.confirmed++
	if k.hist == nil {
		k.hist = hdrhistogram.New(1, 120_000_000, 3)
	}
	_ = k.hist.RecordValue(max(1, lat.Microseconds()))
}

// pct is the p-th percentile of the kind's confirmed answers, in ms (-1:
// none).
func (k *kind) pct(p float64) float64 {
	if k.hist == nil {
		return -1
	}
	return float64(k.hist.ValueAtQuantile(p)) / 1000
}

// pct is the p-th percentile (0 to 100) of the latencies, in ms.
func (r *result) pct(p float64) float64 {
	return float64(r.hist.ValueAtQuantile(p)) / 1000
}

// drive sends for d from conc connections, each request waiting for its
// answer (and, after a 503, for its Retry-After, as field clients do); once
// d passes no new request starts, and drive returns when the last answer is
// in, so the confirmed count is exact. t's requests go round-robin; with
// keyed set, every request carries a unique Idempotency-Key starting with it,
// as field firmware sends.
func drive(ctx context.Context, t target, conc int, d time.Duration, keyed string) (*result, error) {
	conns := make([]*conn, conc)
	for i := range conns {
		var err error
		if conns[i], err = dial(t.host); err != nil {
			for _, c := range conns[:i] {
				c.close()
			}
			return nil, fmt.Errorf("dial: %w", err)
		}
	}
	r := newResult()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			var buf []byte
			for n := i; time.Now().Before(deadline) && ctx.Err() == nil; n += conc {
				req := t.reqs[n%len(t.reqs)]
				if keyed != "" {
					buf = withKey(buf, req, keyed, n)
					req = buf
				}
				t0 := time.Now()
				a, err := c.do(req, 30*time.Second)
				r.record(a, err, time.Since(t0))
				if err != nil {
					c.close()
					if c, err = dial(t.host); err != nil {
						return
					}
					continue
				}
				if a.retryAfter > 0 {
					// As the field clients do: wait as told, but not
					// past the end of the level.
					time.Sleep(min(a.retryAfter, time.Until(deadline)))
				}
			}
			c.close()
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r, ctx.Err()
}
