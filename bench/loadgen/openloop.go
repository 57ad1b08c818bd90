package main

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"
)

// openLoad is what an open-loop level sends: request i, on a connection
// from pool. With keyed set, the requests it names and the others are also
// counted apart (result.split).
type openLoad struct {
	req      func(i int) []byte
	pool     pool
	keyed    func(i int) bool
	timeline bool // each second's requests also counted apart (result.seconds)
}

// pool hands out the connections of an open-loop level; get is called
// from the scheduling goroutine only, put from any sender.
type pool interface {
	get(i int) (*conn, error)        // a connection for request i: idle, new, or (at the bound) the next one back
	put(i int, c *conn, failed bool) // c is back after request i; failed: it is unusable
	opened() int                     // connections opened
	close()                          // closes the idle connections, once every one is back
}

// driveOpen sends at a constant rate for d, whatever the answers do: request
// i is due at start + i/rate, and its latency counts from then, so a stall
// shows as the due requests it holds up (no coordinated omission). A due
// request goes out on a connection of l's pool, which may make it wait with
// its clock running. Each request is sent once: a 503 counts as its answer
// (Retry-After is not waited on here).
func driveOpen(ctx context.Context, l openLoad, rate int, d time.Duration) (*result, error) {
	n := int(float64(rate) * d.Seconds())
	r := newResult()
	var err error // a failed dial, which ends the level
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	interval := time.Second / time.Duration(rate)
	r.start = start
	if l.timeline {
		r.seconds = make([]second, (n+rate-1)/rate)
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 200*time.Microsecond {
			time.Sleep(wait)
		}
		var c *conn
		if c, err = l.pool.get(i); err != nil {
			err = fmt.Errorf("dial: %w", err)
			break
		}
		r.scheduled++
		wg.Go(func() {
			a, err := c.do(l.req(i), 60*time.Second)
			lat := time.Since(due)
			r.record(a, err, lat)
			if l.keyed != nil {
				r.recordSplit(l.keyed(i), a, err != nil, lat)
			}
			if r.seconds != nil {
				r.recordSecond(i/rate, a, err, lat)
			}
			l.pool.put(i, c, err != nil || a.closed)
		})
	}
	wg.Wait()
	l.pool.close()
	r.elapsed, r.conns = time.Since(start), l.pool.opened()
	return r, cmp.Or(err, ctx.Err())
}

// fleet is the honest devices' pool: up to max connections shared by all
// requests, dialed from the fleet's addresses (dial). A fleet's devices do
// not share a few connections.
type fleet struct {
	host  string
	idle  chan *conn // an open connection, or nil: a slot to dial again
	count int        // slots taken: the scheduling goroutine's
}

func newFleet(host string, max int) *fleet {
	return &fleet{host: host, idle: make(chan *conn, max)}
}

func (f *fleet) get(int) (*conn, error) {
	var c *conn
	select {
	case c = <-f.idle:
	default:
		if f.count < cap(f.idle) {
			f.count++
		} else {
			c = <-f.idle
		}
	}
	if c != nil {
		return c, nil
	}
	c, err := dial(f.host)
	if err != nil {
		f.idle <- nil // the slot, for a later try
	}
	return c, err
}

func (f *fleet) put(_ int, c *conn, failed bool) {
	if failed {
		c.close()
		c = nil
	}
	f.idle <- c
}

func (f *fleet) opened() int { return f.count }

func (f *fleet) close() {
	close(f.idle)
	for c := range f.idle {
		if c != nil {
			c.close()
		}
	}
}
