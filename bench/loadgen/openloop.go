package main

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"
)

// driveOpen sends at a constant rate for d, whatever the answers do: request
// i is due at start + i/rate, and its latency counts from then, so a stall
// shows as the due requests it holds up (no coordinated omission). A due
// request goes out on an idle connection, or on a new one while fewer than
// maxConns are open (a fleet's devices do not share a few connections);
// past that it waits for one with its clock running. Each request is sent
// once: a 503 counts as its answer (Retry-After is not waited on here).
func driveOpen(ctx context.Context, t target, maxConns, rate int, d time.Duration, keyed string) (*result, error) {
	n := int(float64(rate) * d.Seconds())
	r := newResult()
	var err error                      // a failed dial, which ends the level
	idle := make(chan *conn, maxConns) // an open connection, or nil: a slot to dial again
	var wg sync.WaitGroup
	send := func(i int, due time.Time, c *conn) {
		req := t.reqs[i%len(t.reqs)]
		if keyed != "" {
			req = withKey(nil, req, keyed, i)
		}
		a, err := c.do(req, 60*time.Second)
		r.record(a, err, time.Since(due))
		if err != nil {
			c.close()
			c, _ = dial(t.host) // nil if that fails
		}
		idle <- c
	}
	start := time.Now().Add(20 * time.Millisecond)
	interval := time.Second / time.Duration(rate)
	opened := 0
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 200*time.Microsecond {
			time.Sleep(wait)
		}
		var c *conn
		select {
		case c = <-idle:
		default:
			if opened < maxConns {
				opened++
			} else {
				c = <-idle
			}
		}
		if c == nil {
			if c, err = dial(t.host); err != nil {
				err = fmt.Errorf("dial: %w", err)
				break
			}
		}
		r.scheduled++
		wg.Go(func() { send(i, due, c) })
	}
	wg.Wait()
	close(idle)
	for c := range idle {
		if c != nil {
			c.close()
		}
	}
	r.elapsed, r.conns = time.Since(start), opened
	return r, cmp.Or(err, ctx.Err())
}
