// Command dsq-driver is the Go SDK driven from the command line, for the
// service's integration tests; sdk/c/tools/dsq-driver.c is its C twin with
// the same commands, so that one test runs both SDKs as device processes.
//
//	dsq-driver record DIR N [START]           records N readings {"v": START+i},
//	                                          printing each one's number once on disk
//	dsq-driver send DIR URL SERIAL [SECONDS]  drains the queue (60 s by default)
//	dsq-driver run DIR URL SERIAL N START [SECONDS]
//	                                          records N readings while sending, then drains
//
// URL is the service's base URL. The token comes from DSQ_TOKEN, the
// secondary one from DSQ_TOKEN2, never from the command line; DSQ_BATCH sets
// BatchReadings. send and run print the final status as one JSON line. Exit
// status: 0 done, 1 usage or error, 2 readings left when the time ran out.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	devicesdk "github.com/devicehub/eventservice/sdk/go"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: dsq-driver record DIR N [START]\n       dsq-driver send DIR URL SERIAL [SECONDS]\n       dsq-driver run DIR URL SERIAL N START [SECONDS]")
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
	return devicesdk.Open(devicesdk.Config{URL: url, Serial: serial, Token: token, SecondaryToken: os.Getenv("DSQ_TOKEN2"),
		Dir: dir, BatchReadings: batch, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
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
		"no_time": s.NoTime, "last_http_status": s.LastStatus})
	fmt.Println(string(line))
	if rc == 0 && s.Queued > 0 {
		rc = 2
	}
	return rc
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "dsq-driver:", err)
	return 1
}
