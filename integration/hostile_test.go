package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// The hostile suite (issue 19): attacks a stranger can make on the open
// internet, each from its own loopback addresses while an honest fleet
// posts from 127.0.0.1. Each attack must leave the fleet >= 99.9%
// successful with a p99 within hostileP99 (or within hostileRatio of the
// same fleet's p99 just before the attack), ingest-api's peak RSS within
// hostileRSS, and the logs within hostileLogRate; afterwards every value
// answered stored is stored exactly once. `make test` runs each attack for
// a few seconds against a lighter fleet; `make chaos` (CHAOS_FULL=1) for
// 10 s against 1,000 readings/s.

const (
	// hostileP99 is the target, checked at full length (make chaos); the
	// short runs of make test allow twice it: the p99 of a 3-second window
	// is its 10th-slowest request, and on a shared 2-core machine one
	// scheduling hiccup of the attacker's process makes it.
	hostileP99      = 250 * time.Millisecond
	hostileP99Short = 2 * hostileP99
	// hostileRatio is how much slower than without the attack the fleet
	// may be. On a machine shared with other work the fleet's p99 without
	// any attack can itself come near hostileP99: then what the attack
	// costs is measured against the same fleet without it, in two quiet
	// windows of half the attack's length, just before the attack (its
	// attacker already started and idle) and just after, the busier of
	// the two (on an idle machine the bound is hostileP99).
	hostileRatio = 3
	// hostileSaturated is a quiet p99 that says the machine cannot carry
	// the fleet at all (measured: 1.4-2.5 s with six other engineers'
	// builds and tests on the two cores): the queue of an open-loop fleet
	// then grows with any extra work, the attacker's own included, and
	// the fleet's p99 under attack says nothing about the service. The
	// latency is then logged, not judged; every other check holds.
	hostileSaturated = 4 * hostileP99
	hostileRSS       = 200 << 20
	hostileLogRate   = 100 << 10 // bytes per second of attack: 1 MB per 10 s
	hostileDevices   = 20
	// hostileWriterRSS bounds writer-worker's peak under the read flood.
	hostileWriterRSS = 300 << 20
	// hostileBigMessages of ~700 KB each are what the read flood reads.
	hostileBigMessages = 20
)

func hostileTiming() (rate int, d time.Duration) {
	if chaosFull() {
		return 1000, 10 * time.Second
	}
	return 300, 3 * time.Second
}

// fleet is an honest fleet posting unique values open loop: a request is
// due every 1/rate s whatever the answers, and its latency counts from
// when it was due, so a stall shows in full.
type fleet struct {
	load
	mu2      sync.Mutex
	tries    []try
	start    time.Time // when request 0 was due; set before run
	interval time.Duration
}

// try is one request of the fleet.
type try struct {
	due      time.Time
	took     time.Duration
	ok       bool
	timedOut bool // the client gave up waiting (10 s)
}

func (f *fleet) run(ctx context.Context, base string, rate int, first int) {
	f.succeeded, f.statuses = map[int]time.Time{}, map[string]int{}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	interval, start := f.interval, f.start
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			wg.Wait()
			return
		}
		v := first + i
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := v % hostileDevices
			body := fmt.Sprintf(`{"serial":"hostile-%d","data":{"v":%d}}`, dev, v)
			req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/deviceapi/event", strings.NewReader(body))
			req.Header.Set("Authorization", fmt.Sprintf("Bearer hostile-tok-5f0c2b9e71d4-%d", dev))
			resp, err := client.Do(req)
			key, ok := "conn_error", false
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if err == nil {
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				key = strconv.Itoa(resp.StatusCode)
				ok = resp.StatusCode == 200 && strings.Contains(string(raw), `"success":true`)
			}
			took := time.Since(due)
			f.mu.Lock()
			f.sent++
			f.statuses[key]++
			if ok {
				f.succeeded[v] = time.Now()
			}
			f.mu.Unlock()
			f.mu2.Lock()
			f.tries = append(f.tries, try{due: due, took: took, ok: ok, timedOut: timedOut})
			f.mu2.Unlock()
		}()
	}
}

// waitAnswered waits until every request due before to has its answer
// (or its client's timeout), however late a busy machine sends them.
func (f *fleet) waitAnswered(t *testing.T, to time.Time) {
	t.Helper()
	due := int((to.Sub(f.start) + f.interval - 1) / f.interval) // requests due before to
	answered := func() int {
		f.mu2.Lock()
		defer f.mu2.Unlock()
		n := 0
		for _, r := range f.tries {
			if r.due.Before(to) {
				n++
			}
		}
		return n
	}
	testenv.WaitFor(t, "the fleet's requests answered", testenv.WaitStall, func() string { return fmt.Sprintf("%d of %d answered", answered(), due) }, nil,
		func() bool { return answered() >= due })
}

// window is what the fleet got in a window of due times.
type window struct {
	n, ok, timedOut int
	p99             time.Duration
	slow            []try // the slowest 1%, for a diagnosis
}

// share is the successful share of the requests, leaving out those the
// client gave up waiting for if lateIsLatency (their lateness is then
// the latency's, logged not judged).
func (w window) share(lateIsLatency bool) float64 {
	n := w.n
	if lateIsLatency {
		n -= w.timedOut
	}
	return float64(w.ok) / float64(max(n, 1))
}

// window returns what the requests due in [from, to) got.
func (f *fleet) window(from, to time.Time) window {
	f.mu2.Lock()
	var in []try
	for _, r := range f.tries {
		if !r.due.Before(from) && r.due.Before(to) {
			in = append(in, r)
		}
	}
	f.mu2.Unlock()
	if len(in) == 0 {
		return window{}
	}
	w := window{n: len(in)}
	for _, r := range in {
		if r.ok {
			w.ok++
		}
		if r.timedOut {
			w.timedOut++
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].took < in[j].took })
	w.p99, w.slow = in[len(in)*99/100].took, in[len(in)*99/100:]
	return w
}

// peakRSS reads a process's peak resident set since resetPeak.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
}

func (s *stack) logBytes() int64 {
	var n int64
	entries, _ := os.ReadDir(s.logDir)
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(s.logDir, e.Name())); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// attacker dials from its own loopback address.
func attackerDial(ip string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return d.DialContext
}

func attackerClient(ip string, conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: attackerDial(ip), MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

// tally counts answers by status, safely from many goroutines.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tally) add(k string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	c.mu.Unlock()
}

// counts is a copy of the counts.
func (c *tally) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

type hostileAttack struct {
	name string
	// build prepares the attack (its bodies) and returns it.
	build func() attackFunc
	// check says what is wrong with what the attack got ("": nothing).
	check func(got map[string]int) string
}

// TestHostileAttacker is not a test: TestHostileInput runs each attack in
// a process of its own (this test binary, with HOSTILE_ATTACK set), as an
// attacker elsewhere would be, so that its goroutines do not queue ahead
// of the honest fleet's in one scheduler. It prints what the attack got.
func TestHostileAttacker(t *testing.T) {
	name := os.Getenv("HOSTILE_ATTACK")
	if name == "" {
		t.Skip("run by TestHostileInput")
	}
	d, err := time.ParseDuration(os.Getenv("HOSTILE_DURATION"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hostileAttacks() {
		if a.name == name {
			// Prepared, the attacker says so and waits for the word: the
			// fleet's window covers the attack, not this process's start.
			run := a.build()
			fmt.Println("hostile-ready")
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			got := run(ctx, target{base: os.Getenv("HOSTILE_BASE"), ws: os.Getenv("HOSTILE_WORKSPACE"), ops: os.Getenv("HOSTILE_OPS")})
			cancel()
			b, _ := json.Marshal(got)
			fmt.Printf("\nhostile-tally %s\n", b)
			return
		}
	}
	t.Fatalf("no attack %q", name)
}

// attack runs a in a process of its own for d, calling start once the
// process is ready to attack, and returns what it got.
func attack(t *testing.T, s *stack, a hostileAttack, d time.Duration, start func()) map[string]int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileAttacker$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HOSTILE_ATTACK="+a.name, "HOSTILE_DURATION="+d.String(),
		"HOSTILE_BASE="+s.base, "HOSTILE_WORKSPACE="+s.ws, "HOSTILE_OPS="+s.ops["ingest-api"])
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := bufio.NewReader(stdout)
	for {
		line, err := r.ReadString('\n')
		out.WriteString(line)
		if strings.TrimSpace(line) == "hostile-ready" {
			break
		}
		if err != nil {
			_ = cmd.Wait()
			t.Fatalf("attack %s did not get ready:\n%s", a.name, tail(out.Bytes(), 2000))
		}
	}
	start()
	_, _ = io.WriteString(stdin, "go\n")
	_, _ = io.Copy(&out, r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("attack %s: %v\n%s", a.name, err, tail(out.Bytes(), 2000))
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "hostile-tally "); ok {
			got := map[string]int{}
			if err := json.Unmarshal([]byte(rest), &got); err != nil {
				t.Fatal(err)
			}
			return got
		}
	}
	t.Fatalf("attack %s printed no tally:\n%s", a.name, tail(out.Bytes(), 2000))
	return nil
}

// provisionBig makes the device whose large messages the read flood reads.
func provisionBig(t *testing.T, s *stack) {
	t.Helper()
	if r := s.admin(t, http.MethodPut, "/devices/hostile-big", `{"accessToken":"hostile-big-token-1","inputs":[{"name":"v","entity":"big","entityInput":"v"}]}`); r.Status != 200 {
		t.Fatalf("provision: %d %s", r.Status, r.Raw)
	}
	blob := strings.Repeat("x", 700<<10)
	for i := range hostileBigMessages {
		r := s.post(t, fmt.Sprintf(`{"serial":"hostile-big","data":{"v":%d,"blob":"%s"}}`, i, blob), bearer("hostile-big-token-1"))
		if r.Status != 200 {
			t.Fatalf("big message %d: %d %s", i, r.Status, r.Raw)
		}
	}
}

func TestHostileInput(t *testing.T) {
	rate, d := hostileTiming()
	p99Bound := hostileP99Short
	if chaosFull() {
		p99Bound = hostileP99
	}
	ns := testenv.NATSControl(t)
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL(), "LOG_LEVEL=info")
	s.nats = ns
	s.start("writer-worker")
	s.start("mapper-worker")
	s.start("ingest-api")
	s.waitReady()
	for i := range hostileDevices {
		body := fmt.Sprintf(`{"accessToken":"hostile-tok-5f0c2b9e71d4-%d","inputs":[{"name":"v","entity":"chaos","entityInput":"v"}]}`, i)
		if r := s.admin(t, http.MethodPut, fmt.Sprintf("/devices/hostile-%d", i), body); r.Status != 200 {
			t.Fatalf("provision: %d %s", r.Status, r.Raw)
		}
	}
	provisionBig(t, s)
	pid, writerPID := s.procs["ingest-api"].Process.Pid, s.procs["writer-worker"].Process.Pid
	f := &fleet{start: time.Now(), interval: time.Second / time.Duration(rate)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx, s.base, rate, 0) }()
	time.Sleep(time.Second) // the fleet's connections are open
	for _, a := range hostileAttacks() {
		if !chosen(a.name, os.Getenv("HOSTILE_ONLY")) {
			continue
		}
		var logs0 int64
		var quietFrom, quietTo, from time.Time
		var cpu0, quietCPU float64
		got := attack(t, s, a, d, func() {
			time.Sleep(300 * time.Millisecond) // the attacker's start-up has passed
			quietFrom, quietTo, quietCPU = quietly(d/2, pid)
			logs0 = s.logBytes()
			resetPeak(t, pid)
			resetPeak(t, writerPID)
			from, cpu0 = time.Now(), cpuSecs(pid)
		})
		to, cpu := time.Now(), cpuSecs(pid)-cpu0
		if a.name == "workspace-read-flood" {
			// Reads the flood left behind run on in writer-worker and
			// ClickHouse until their 5 s timeout: the next attack's window
			// starts after them, so that it measures that attack alone.
			time.Sleep(5 * time.Second)
		}
		rss, writerRSS := peakRSS(t, pid), peakRSS(t, writerPID)
		logs := s.logBytes() - logs0
		afterFrom, afterTo, afterCPU := quietly(d/2, pid)
		quietCPU += afterCPU
		f.waitAnswered(t, afterTo)
		w := f.window(from, to)
		// The quieter of the two halves would judge the attack by the
		// machine's best moment; the busier one is the machine around it.
		quietP99 := max(f.window(quietFrom, quietTo).p99, f.window(afterFrom, afterTo).p99)
		saturated := quietP99 > hostileSaturated
		n, share, p99 := w.n, w.share(saturated), w.p99
		bound := max(p99Bound, hostileRatio*quietP99)
		line := fmt.Sprintf("hostile attack=%s fleet_requests=%d fleet_success=%.4f fleet_p99_ms=%.1f quiet_p99_ms=%.1f ratio=%.2f ingest_cpu_s=%.2f quiet_cpu_s=%.2f ingest_peak_rss_mb=%.1f writer_peak_rss_mb=%.1f log_bytes=%d attack=%v",
			a.name, n, share, ms(p99), ms(quietP99), float64(p99)/float64(max(quietP99, time.Millisecond)), cpu, quietCPU, float64(rss)/(1<<20), float64(writerRSS)/(1<<20), logs, got)
		t.Log(line)
		fmt.Println(line)
		if os.Getenv("HOSTILE_SLOW") != "" {
			for _, r := range w.slow {
				fmt.Printf("  slow: due +%v took %v ok %v\n", r.due.Sub(from).Round(time.Millisecond), r.took.Round(time.Millisecond), r.ok)
			}
		}
		switch {
		case share < 0.999:
			t.Errorf("%s: fleet success %.4f, want >= 0.999 (statuses %v)", a.name, share, f.statuses)
		case saturated:
			t.Logf("%s: fleet p99 %v (%d requests timed out) not judged: %v without the attack, the machine cannot carry the fleet", a.name, p99, w.timedOut, quietP99)
		case p99 > bound:
			t.Errorf("%s: fleet p99 %v, want <= %v (the larger of %v and %d times the %v without the attack)", a.name, p99, bound, p99Bound, hostileRatio, quietP99)
		}
		if a.check != nil {
			if wrong := a.check(got); wrong != "" {
				t.Errorf("%s: %s (%v)", a.name, wrong, got)
			}
		}
		if writerRSS > hostileWriterRSS {
			t.Errorf("%s: writer-worker peak RSS %.1f MB, want <= %d MB", a.name, float64(writerRSS)/(1<<20), hostileWriterRSS>>20)
		}
		if rss > hostileRSS {
			t.Errorf("%s: ingest-api peak RSS %.1f MB, want <= %d MB", a.name, float64(rss)/(1<<20), hostileRSS>>20)
		}
		if limit := int64(hostileLogRate * d.Seconds()); logs > limit {
			t.Errorf("%s: %d bytes of logs in %v, want <= %d", a.name, logs, d, limit)
		}
	}
	cancel()
	<-done
	reconcile(t, s, "hostile", &f.load)
}

// chosen reports whether HOSTILE_ONLY (only: comma-separated parts of
// attack names; empty: every attack) names the attack.
func chosen(name, only string) bool {
	if only == "" {
		return true
	}
	return slices.ContainsFunc(strings.Split(only, ","), func(part string) bool { return strings.Contains(name, part) })
}

// quietly lets the fleet post alone for d, and says when, and what CPU
// ingest-api (pid) used meanwhile.
func quietly(d time.Duration, pid int) (from, to time.Time, cpu float64) {
	from, cpu0 := time.Now(), cpuSecs(pid)
	time.Sleep(d)
	return from, time.Now(), cpuSecs(pid) - cpu0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
