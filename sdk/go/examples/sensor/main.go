// Command sensor is a device that records a reading from a (fake) sensor
// every few seconds and sends its queue in the background. Copy and adapt.
//
//	DSQ_TOKEN=secret sensor URL SERIAL QUEUE_DIR [INTERVAL_SECONDS]
//
// e.g. DSQ_TOKEN=… sensor http://127.0.0.1:8080 dev-001 /var/lib/sensor/queue 5
//
// The token comes from the environment (DSQ_TOKEN, and DSQ_TOKEN2 for the
// next one during a rotation), never from the command line, where ps shows
// it. SIGINT or SIGTERM stop it; what is not sent yet stays on disk for the
// next start.
package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	devicesdk "github.com/devicehub/eventservice/sdk/go"
)

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 || os.Getenv("DSQ_TOKEN") == "" {
		fmt.Fprintln(os.Stderr, "usage: DSQ_TOKEN=… sensor URL SERIAL QUEUE_DIR [INTERVAL_SECONDS]")
		os.Exit(1)
	}
	every := 10 * time.Second
	if len(os.Args) == 5 {
		secs, err := strconv.Atoi(os.Args[4])
		if err != nil || secs <= 0 {
			log.Fatalf("sensor: interval %q", os.Args[4])
		}
		every = time.Duration(secs) * time.Second
	}
	client, err := devicesdk.Open(devicesdk.Config{
		URL:            os.Args[1],
		Serial:         os.Args[2],
		Dir:            os.Args[3],
		Token:          os.Getenv("DSQ_TOKEN"),
		SecondaryToken: os.Getenv("DSQ_TOKEN2"),
		Logf:           log.Printf,
		OnAuthFailure: func(status int) {
			log.Printf("sensor: the service refused the token (HTTP %d): fetch a new one", status)
		},
	})
	if err != nil {
		log.Fatalf("sensor: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sent := make(chan struct{})
	go func() { defer close(sent); _ = client.Run(ctx) }()

	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		// Record returns once the reading is on disk: from here on it is
		// sent, across restarts and outages, and stored once.
		if err := client.Record(map[string]any{"temp": 20 + rand.Float64()*2}); err != nil {
			log.Printf("sensor: record: %v", err)
		}
		select {
		case <-ctx.Done():
			<-sent
			s := client.Status()
			log.Printf("sensor: %d readings queued (%d bytes on disk), %d stored, last answer %d %s",
				s.Queued, s.BytesOnDisk, s.Stored, s.LastStatus, s.LastError)
			if err := client.Close(); err != nil {
				log.Printf("sensor: close: %v", err)
			}
			return
		case <-tick.C:
		}
	}
}
