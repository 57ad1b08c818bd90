// Command dsq-driver is the Go SDK driven from the command line, for the
// service's integration tests; sdk/c/tools/dsq-driver.c is its C twin with
// the same commands, so that one test runs both SDKs as device processes.
//
//	dsq-driver record DIR N [START]           records N readings {"v": START+i},
//	                                          printing each one's number once on disk
//	dsq-driver send DIR URL SERIAL [SECONDS]  drains the queue (60 s by default)
//	dsq-driver run DIR URL SERIAL N START [SECONDS]
//	                                          records N readings while sending, then drains
//	dsq-driver fill DIR N START [STEP_MS]     records N readings {"v": START+i, "w": i%100}
//	                                          a thousand to a sync, the last one now and
//	                                          each STEP_MS before the next (a backlog)
//
// URL is the service's base URL. The token comes from DSQ_TOKEN, the
// secondary one from DSQ_TOKEN2, never from the command line; DSQ_BATCH sets
// BatchReadings, DSQ_MAX_MB the queue's MaxBytes in MiB, DSQ_MAX_BACKOFF_MS
// MaxBackoff. send and run print the final status as one JSON line, with
// the seconds they took and the CPU seconds the process used. Exit
// status: 0 done, 1 usage or error, 2 readings left when the time ran out.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	devicesdk "github.com/devicehub/eventservice/sdk/go"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: dsq-driver record DIR N [START]\n       dsq-driver send DIR URL SERIAL [SECONDS]\n       dsq-driver run DIR URL SERIAL N START [SECONDS]\n       dsq-driver fill DIR N START [STEP_MS]")
	return 1
}

func run(args []string) int {
	num := func(i int, def int64) (int64, bool) {
		if i >= len(args) {
			return def, true
		}
		v, err := strconv.ParseInt(args[i], 10, 64)
		return v, err == nil && v >= 0
	}
	switch {
	case len(args) >= 3 && len(args) <= 4 && args[0] == "record":
		n, ok1 := num(2, 0)
		start, ok2 := num(3, 0)
		if !ok1 || !ok2 {
			return usage()
		}
		c, err := open(args[1], "http://127.0.0.1:1", "-")
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		return record(c, n, start)
	case len(args) >= 4 && len(args) <= 5 && args[0] == "fill":
		n, ok1 := num(2, 0)
		start, ok2 := num(3, 0)
		step, ok3 := num(4, 0)
		if !ok1 || !ok2 || !ok3 {
			return usage()
		}
		c, err := open(args[1], "http://127.0.0.1:1", "-")
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		return fill(c, n, start, time.Duration(step)*time.Millisecond)
	case len(args) >= 4 && len(args) <= 5 && args[0] == "send":
		secs, ok := num(4, 60)
		if !ok {
			return usage()
		}
		return drive(args[1], args[2], args[3], 0, 0, secs)
	case len(args) >= 6 && len(args) <= 7 && args[0] == "run":
		n, ok1 := num(4, 0)
		start, ok2 := num(5, 0)
		secs, ok3 := num(6, 60)
		if !ok1 || !ok2 || !ok3 {
			return usage()
		}
		return drive(args[1], args[2], args[3], n, start, secs)
	}
	return usage()
}

func open(dir, url, serial string) (*devicesdk.Client, error) {
	token := os.Getenv("DSQ_TOKEN")
	if token == "" {
		token = "-" // record only: nothing is sent
	}
	batch, _ := strconv.Atoi(os.Getenv("DSQ_BATCH"))
	mb, _ := strconv.ParseInt(os.Getenv("DSQ_MAX_MB"), 10, 64)
	maxBackoff, _ := strconv.ParseInt(os.Getenv("DSQ_MAX_BACKOFF_MS"), 10, 64)
	return devicesdk.Open(devicesdk.Config{URL: url, Serial: serial, Token: token, SecondaryToken: os.Getenv("DSQ_TOKEN2"),
		Dir: dir, BatchReadings: batch, Queue: devicesdk.QueueOptions{MaxBytes: mb << 20}, MaxBackoff: time.Duration(maxBackoff) * time.Millisecond, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
}

func record(c *devicesdk.Client, n, start int64) int {
	for i := range n {
		if err := c.Record(map[string]any{"v": start + i}); err != nil {
			return fail(err)
		}
		fmt.Println(start + i)
	}
	return 0
}

func fill(c *devicesdk.Client, n, start int64, step time.Duration) int {
	now := time.Now()
	rs := make([]devicesdk.Reading, 0, 1000)
	for i := range n {
		rs = append(rs, devicesdk.Reading{JSON: fmt.Appendf(nil, `{"v":%d,"w":%d}`, start+i, i%100), Time: now.Add(-time.Duration(n-1-i) * step)})
		if len(rs) == cap(rs) || i == n-1 {
			if err := c.RecordAll(rs); err != nil {
				return fail(err)
			}
			rs = rs[:0]
		}
	}
	fmt.Println(n)
	return 0
}

// drive records n readings while sending, then sends until the queue is
// empty or secs have passed.
func drive(dir, url, serial string, n, start, secs int64) int {
	if os.Getenv("DSQ_TOKEN") == "" {
		return usage()
	}
	c, err := open(dir, url, serial)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	rc := record(c, n, start)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for rc == 0 && c.Status().Queued > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	s := c.Status()
	var refused uint64
	for _, v := range s.Refused {
		refused += v
	}
	line, _ := json.Marshal(map[string]any{"queued": s.Queued, "bytes_on_disk": s.BytesOnDisk, "sent": s.Sent, "stored": s.Stored,
		"refused": refused, "dropped": s.Dropped, "refused_full": s.RefusedFull, "torn_bytes": s.TornBytes,
		"no_time": s.NoTime, "last_http_status": s.LastStatus, "seconds": time.Since(began).Seconds(), "cpu_seconds": cpuSeconds()})
	fmt.Println(string(line))
	if rc == 0 && s.Queued > 0 {
		rc = 2
	}
	return rc
}

// cpuSeconds is the user and system CPU time this process used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "dsq-driver:", err)
	return 1
}
