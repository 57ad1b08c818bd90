// Command loadgen is the load generator behind `make bench`. It provisions
// devices through the workspace API, drives POST /api/v1/deviceapi/event (or,
// with -batch, backlogs to POST /api/v1/deviceapi/events) at
// each concurrency for a fixed time over raw keep-alive connections, counts
// only `success: true` answers as confirmed, waits for the answers still in
// flight, and checks that ClickHouse holds exactly that many values. The same
// load is driven at a ceiling server (an Echo handler that decodes and checks
// the request and stores nothing) for the ratio. With -flood it also plays
// a botnet of unknown serials or wrong tokens beside an open-loop fleet and
// reports what the diagnostics kept of it (deploy/dev/flood.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	target, workspace, adminToken, clickhouse, database string
	devices                                             int
	levels                                              []int
	duration, settle                                    time.Duration
	pids                                                map[string]int
	out                                                 string
	keyed, mixed, timeline                              bool
	batch                                               int
	rates                                               []int // open loop: requests per second, one level each
	openConns                                           int
	flood                                               string // beside the open loop: floodUnknown or floodToken
	floodRate, floodPerSource                           int
	floodSettle                                         time.Duration
	nats                                                string
}

// keyedMode names which requests carry an Idempotency-Key: "true" (all),
// "false" (none) or "mixed" (half: each device in turn).
func (c config) keyedMode() string {
	if c.mixed {
		return "mixed"
	}
	return strconv.FormatBool(c.keyed)
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err = run(ctx, cfg)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var c config
	var levels, pids string
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&c.target, "target", "http://127.0.0.1:8080", "ingest-api's device port, base URL")
	fs.StringVar(&c.workspace, "workspace", "http://127.0.0.1:8084", "ingest-api's workspace listener, base URL (devices are provisioned there)")
	fs.StringVar(&c.adminToken, "admin-token", "", "workspace API token (default: ADMIN_TOKEN, not shown here)")
	fs.StringVar(&c.clickhouse, "clickhouse-http", "http://127.0.0.1:8123", "ClickHouse HTTP interface, for the reconciliation")
	fs.StringVar(&c.database, "database", "device_events", "ClickHouse database")
	fs.IntVar(&c.devices, "devices", 1000, "devices to provision and spread the load over")
	fs.StringVar(&levels, "conc", "16,64,256,1024", "concurrency levels")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "load time per level")
	fs.DurationVar(&c.settle, "settle", 2*time.Second, "pause between levels")
	fs.StringVar(&pids, "pids", "", "processes to sample: name=pid,name=pid")
	fs.StringVar(&c.out, "out", "", "append the result lines to this file")
	fs.BoolVar(&c.keyed, "keyed", false, "send a unique Idempotency-Key with every request, as field firmware does")
	fs.BoolVar(&c.mixed, "mixed", false, "open loop: half the requests keyed (a unique Idempotency-Key; each device's in turn), the others not, their confirmed answers' latencies reported apart: both paths measured under the same load at once")
	fs.BoolVar(&c.timeline, "timeline", false, "open loop: also one line per second of each level (the latency of the requests due in it, and each sampled process's CPU over it), to see a level's slow seconds and whose CPU they line up with")
	var rates string
	fs.StringVar(&rates, "rates", "", "open loop instead of closed: constant arrival rates per second, one level each (latency from each request's scheduled time)")
	fs.IntVar(&c.openConns, "open-conns", 1024, "most connections of an open-loop level: a due request takes an idle one or opens one up to this, then waits")
	fs.StringVar(&c.flood, "flood", "", "beside each -rates level (0: none), a flood from a botnet: \"unknown\" (a new unknown serial every request) or \"token\" (provisioned serials, wrong tokens)")
	fs.IntVar(&c.floodRate, "flood-rate", 10000, "the flood's requests per second")
	fs.IntVar(&c.floodPerSource, "flood-per-source", 20, "the flood's requests per source address (127.10.0.1 onwards), then the next address")
	fs.DurationVar(&c.floodSettle, "flood-settle", 25*time.Second, "after a flood, the wait for the last diagnostics reports to be stored before RSS and rows are read")
	fs.StringVar(&c.nats, "nats", "", "with -flood: NATS URL to watch the diagnostics reports on, as user operator (NATS_OPERATOR_PASSWORD)")
	fs.IntVar(&c.batch, "batch", 0, "backlog mode: POST /api/v1/deviceapi/events with this many messages of 2 inputs per request (0: one reading per request)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.levels, err = intList(levels, "-conc", 1, 4096); err != nil {
		return c, err
	}
	least := 1
	if c.flood != "" {
		least = 0 // a flood alone
	}
	if c.rates, err = intList(rates, "-rates", least, 100000); err != nil {
		return c, err
	}
	if c.flood != "" && (c.flood != floodUnknown && c.flood != floodToken || len(c.rates) == 0 || c.floodRate < 0 || c.floodPerSource < 1) {
		return c, fmt.Errorf("-flood must be %q or %q, with -rates, -flood-rate >= 0 and -flood-per-source >= 1", floodUnknown, floodToken)
	}
	if c.mixed && (c.keyed || len(c.rates) == 0 || c.flood != "" || c.batch > 0) {
		return c, fmt.Errorf("-mixed needs -rates, and neither -keyed, -flood nor -batch")
	}
	if c.openConns < 1 || c.openConns > 4096 {
		return c, fmt.Errorf("-open-conns must be 1 to 4096")
	}
	c.pids = map[string]int{}
	for _, kv := range strings.Split(pids, ",") {
		if kv == "" {
			continue
		}
		name, v, ok := strings.Cut(kv, "=")
		pid, err := strconv.Atoi(v)
		if !ok || err != nil {
			return c, fmt.Errorf("bad -pids entry %q", kv)
		}
		c.pids[name] = pid
	}
	if c.adminToken == "" {
		c.adminToken = os.Getenv("ADMIN_TOKEN")
	}
	if c.adminToken == "" {
		return c, fmt.Errorf("-admin-token (or ADMIN_TOKEN) is required")
	}
	if c.batch < 0 || c.batch > 1000 {
		return c, fmt.Errorf("-batch must be 0 to 1000")
	}
	if c.timeline && c.duration > maxTimeline {
		return c, fmt.Errorf("-timeline takes levels of at most %s", maxTimeline)
	}
	if c.duration <= 0 || c.devices < 1 {
		return c, fmt.Errorf("-duration and -devices must be positive")
	}
	return c, nil
}

// intList parses the comma-separated levels of flag name, each least to
// most; blank entries are skipped.
func intList(s, name string, least, most int) ([]int, error) {
	var ns []int
	for _, l := range strings.Split(s, ",") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n < least || n > most {
			return nil, fmt.Errorf("bad %s level %q", name, l)
		}
		ns = append(ns, n)
	}
	return ns, nil
}
