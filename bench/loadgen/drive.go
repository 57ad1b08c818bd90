package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"
)

// result is what one level of load produced.
type result struct {
	conc      int
	sent      int
	confirmed int
	statuses  map[int]int
	errors    int
	elapsed   time.Duration
	latencies []time.Duration // of every answered request
}

func (r result) pct(p float64) float64 {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.latencies)-1) * p)
	return float64(r.latencies[i].Microseconds()) / 1000
}

// drive sends for d from conc connections, each request waiting for its
// answer (and, after a 503, for its Retry-After, as field clients do); once
// d passes no new request starts, and drive returns when the last answer is
// in, so the confirmed count is exact. reqs go round-robin; with keyed set,
// every request carries a unique Idempotency-Key starting with it, as field
// firmware sends.
func drive(ctx context.Context, base string, conc int, d time.Duration, reqs [][]byte, keyed string) (result, error) {
	u, err := url.Parse(base)
	if err != nil {
		return result{}, err
	}
	type worker struct {
		lat            []time.Duration
		sent, ok, errs int
		statuses       map[int]int
	}
	ws := make([]worker, conc)
	conns := make([]*conn, conc)
	for i := range conns {
		if conns[i], err = dial(u.Host); err != nil {
			for _, c := range conns[:i] {
				c.close()
			}
			return result{}, fmt.Errorf("dial: %w", err)
		}
	}
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ws[i]
			w.statuses = map[int]int{}
			w.lat = make([]time.Duration, 0, 4096)
			c := conns[i]
			defer func() { c.close() }()
			var buf []byte
			for n := i; time.Now().Before(deadline) && ctx.Err() == nil; n += conc {
				req := reqs[n%len(reqs)]
				if keyed != "" {
					buf = withKey(buf, req, keyed, n)
					req = buf
				}
				t0 := time.Now()
				a, err := c.do(req, 30*time.Second)
				w.sent++
				if err != nil {
					w.errs++
					c.close()
					if c, err = dial(u.Host); err != nil {
						return
					}
					continue
				}
				w.lat = append(w.lat, time.Since(t0))
				w.statuses[a.status]++
				if a.ok {
					w.ok++
				}
				if a.retryAfter > 0 {
					// As the field clients do: wait as told, but not
					// past the end of the level.
					time.Sleep(min(a.retryAfter, time.Until(deadline)))
				}
			}
		}()
	}
	wg.Wait()
	r := result{conc: conc, elapsed: time.Since(start), statuses: map[int]int{}}
	for _, w := range ws {
		r.sent += w.sent
		r.confirmed += w.ok
		r.errors += w.errs
		r.latencies = append(r.latencies, w.lat...)
		for k, v := range w.statuses {
			r.statuses[k] += v
		}
	}
	slices.Sort(r.latencies)
	return r, ctx.Err()
}
