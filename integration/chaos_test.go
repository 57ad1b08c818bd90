package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/integration/testenv"
)

// The fault tests of issue 4: real processes killed, stopped and restarted
// under load. Every value answered `success: true` must be in ClickHouse
// exactly once afterwards, and no value may be stored twice. `make test`
// runs a short version; `make chaos` (CHAOS_FULL=1) runs every fault (those
// of chaos_*_test.go and scale_test.go too) with longer load.

func chaosFull() bool { return os.Getenv("CHAOS_FULL") != "" }

// chaosEnv shortens redelivery so that a killed worker's events come back
// within the test.
var chaosEnv = []string{"ACK_WAIT=2s", "INSERT_TIMEOUT=1s", "LOG_LEVEL=info", "DEVICE_RATE=0", "RETRY_MAX_DELAY=2s"}

const chaosDevices = 8

func provisionChaos(t *testing.T, s *stack) {
	t.Helper()
	for i := range chaosDevices {
		body := fmt.Sprintf(`{"accessToken":"chaos-tok-5f0c2b9e71d4-%d","inputs":[{"name":"v","entity":"chaos","entityInput":"v"}]}`, i)
		if r := s.admin(t, http.MethodPut, fmt.Sprintf("/devices/chaos-%d", i), body); r.Status != 200 {
			t.Fatalf("provision: %d %s", r.Status, r.Raw)
		}
	}
}

// load is a bounded set of clients posting unique integer values.
type load struct {
	mu        sync.Mutex
	sent      int
	retries   int               // keyed values sent again after an answer other than stored
	succeeded map[int]time.Time // when each value was answered stored
	statuses  map[string]int
	answers   []answered // every request's end, in order
	// mayLoseFrom, mayLoseTo: values answered stored between them may be
	// missing (a fault the shipped settings do not survive, counted);
	// zero: none.
	mayLoseFrom, mayLoseTo time.Time
}

// answered is when a request ended, how long it took, and whether it was
// answered stored.
type answered struct {
	at   time.Time
	took time.Duration
	ok   bool
}

// run posts from conc clients until ctx ends. Even clients send each value
// once, without a key; odd ones behave as field firmware does: an
// Idempotency-Key per value, and the same value again until it is answered
// stored. Either way a value stored twice is the service's duplicate.
func (l *load) run(ctx context.Context, bases []string, conc int) {
	l.succeeded, l.statuses = map[int]time.Time{}, map[string]int{}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keyed := w%2 == 1
			base := bases[(w/2)%len(bases)]
			for n := 0; ctx.Err() == nil; {
				v := w*1_000_000 + n
				dev := v % chaosDevices
				body := fmt.Sprintf(`{"serial":"chaos-%d","data":{"v":%d}}`, dev, v)
				req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/deviceapi/event", bytes.NewBufferString(body))
				req.Header.Set("Authorization", fmt.Sprintf("Bearer chaos-tok-5f0c2b9e71d4-%d", dev))
				if keyed {
					req.Header.Set("Idempotency-Key", fmt.Sprintf("chaos-key-%d", v))
				}
				start := time.Now()
				resp, err := client.Do(req)
				took := time.Since(start)
				key := "conn_error"
				ok := false
				if err == nil {
					var b bytes.Buffer
					_, _ = b.ReadFrom(resp.Body)
					resp.Body.Close()
					key = strconv.Itoa(resp.StatusCode)
					ok = resp.StatusCode == 200 && bytes.Contains(b.Bytes(), []byte(`"success":true`))
				}
				if !ok {
					// Back off a little, as field clients do (they honour
					// Retry-After); ingest-api itself may be down.
					time.Sleep(50 * time.Millisecond)
				}
				l.mu.Lock()
				l.sent++
				l.statuses[key]++
				now := time.Now()
				l.answers = append(l.answers, answered{at: now, took: took, ok: ok})
				if ok {
					l.succeeded[v] = now
				} else if keyed {
					l.retries++
				}
				l.mu.Unlock()
				if ok || !keyed {
					n++
				}
			}
		}()
	}
	wg.Wait()
}

// reconcile waits for pending events to land, then checks every success.
func reconcile(t *testing.T, s *stack, fault string, l *load) {
	t.Helper()
	verdict(t, fault, l, settled(t, s))
}

// settled waits until the stored values stop changing and returns how often
// each is stored.
func settled(t *testing.T, s *stack) map[int]uint64 {
	t.Helper()
	counts := map[int]uint64{}
	last, stable := "none yet", 0
	// Settled: three looks 500 ms apart find the same values and rows
	// stored (a late second copy of a value adds a row, not a value); a
	// busy machine stores them slowly, but it stores some (testenv.WaitFor).
	testenv.WaitFor(t, "the stored values settle", 40*time.Second, func() string { return last + " stored" }, nil, func() bool {
		time.Sleep(500 * time.Millisecond)
		counts = storedValues(t, s)
		var rows uint64
		for _, n := range counts {
			rows += n
		}
		if now := fmt.Sprintf("%d values in %d rows", len(counts), rows); now == last {
			stable++
		} else {
			last, stable = now, 0
		}
		return stable >= 3
	})
	return counts
}

// describeValue names a value the checker found wrong: which client sent
// it (odd clients send a key), how often it is stored, whether it was
// answered stored.
func describeValue(v int, stored uint64, l *load) string {
	w := v / 1_000_000
	return fmt.Sprintf("value %d (client %d, keyed %v, device chaos-%d): stored %d times, answered stored %v", v, w, w%2 == 1, v%chaosDevices, stored, !l.succeeded[v].IsZero())
}

// verdict prints the fault's line and fails when a value answered stored is
// not stored, or a value is stored twice.
func verdict(t *testing.T, fault string, l *load, counts map[int]uint64) {
	t.Helper()
	missing, dups, lost := 0, 0, 0
	var oldest time.Time // of the values lost as allowed
	var which []string   // the first few values wrong, for the investigation
	for v, at := range l.succeeded {
		if counts[v] == 0 && !l.mayLoseFrom.IsZero() && !at.Before(l.mayLoseFrom) && at.Before(l.mayLoseTo) {
			if lost++; oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
			continue
		}
		if counts[v] == 0 {
			missing++
			if len(which) < 20 {
				which = append(which, describeValue(v, 0, l))
			}
		}
	}
	for v, n := range counts {
		if n > 1 {
			dups++
			if len(which) < 20 {
				which = append(which, describeValue(v, n, l))
			}
		}
	}
	t.Logf("chaos fault=%s sent=%d keyed_retries=%d successes=%d stored=%d missing=%d duplicates=%d statuses=%v",
		fault, l.sent, l.retries, len(l.succeeded), len(counts), missing, dups, l.statuses)
	fmt.Printf("chaos fault=%s sent=%d keyed_retries=%d successes=%d stored=%d missing=%d duplicates=%d\n",
		fault, l.sent, l.retries, len(l.succeeded), len(counts), missing, dups)
	if !l.mayLoseFrom.IsZero() {
		fmt.Printf("chaos fault=%s answered stored from %s to %s and missing (allowed by the settings): %d, the oldest answered at %s\n",
			fault, l.mayLoseFrom.Format(time.TimeOnly), l.mayLoseTo.Format(time.TimeOnly), lost, oldest.Format("15:04:05.000"))
	}
	if missing != 0 || dups != 0 {
		t.Fatalf("%s: %d values answered stored are missing, %d values stored twice: %s", fault, missing, dups, strings.Join(which, "; "))
	}
	if len(l.succeeded) == 0 {
		t.Fatalf("%s: no request succeeded: the test proved nothing", fault)
	}
}

func storedValues(t *testing.T, s *stack) map[int]uint64 {
	t.Helper()
	out, err := valuesOn(s.ch, s.db, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// valuesOn counts the integer values stored for entity in db on the server
// behind conn, by value (the chaos load's entity is "chaos").
func valuesOn(conn driver.Conn, db, entity string) (map[int]uint64, error) {
	rows, err := conn.Query(context.Background(), "SELECT value_json, count() FROM "+db+".input_values WHERE entity = ? GROUP BY value_json", entity)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]uint64{}
	for rows.Next() {
		var v string
		var n uint64
		if err := rows.Scan(&v, &n); err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("value %q of %s is not one of the test's integers", v, entity)
		}
		out[i] = n
	}
	return out, rows.Err()
}

// underLoad runs the load for d, calling fault once at `at`.
func underLoad(t *testing.T, s *stack, d, at time.Duration, fault func()) *load {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l := &load{}
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx, s.bases, 24) }()
	time.Sleep(at)
	fault()
	<-done
	return l
}

func chaosDuration() (total, at time.Duration) {
	if chaosFull() {
		return 20 * time.Second, 5 * time.Second
	}
	return 4 * time.Second, 1500 * time.Millisecond
}

func (s *stack) kill(t *testing.T, name string, sig os.Signal) {
	t.Helper()
	cmd := s.procs[name]
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// killUnderLoad SIGKILLs a program mid-load and starts it again a second later.
func killUnderLoad(t *testing.T, name, fault string) {
	s := startStack(t, chaosEnv...)
	provisionChaos(t, s)
	total, at := chaosDuration()
	l := underLoad(t, s, total, at, func() {
		s.kill(t, name, os.Kill)
		time.Sleep(time.Second)
		s.start(name)
	})
	reconcile(t, s, fault, l)
}

func TestChaosWriterKilled(t *testing.T) { killUnderLoad(t, "writer-worker", "writer-sigkill") }

func TestChaosMapperKilled(t *testing.T) { killUnderLoad(t, "mapper-worker", "mapper-sigkill") }

func TestChaosGracefulRestarts(t *testing.T) {
	if !chaosFull() {
		t.Skip("CHAOS_FULL: make chaos")
	}
	s := startStack(t, chaosEnv...)
	provisionChaos(t, s)
	l := underLoad(t, s, 20*time.Second, 3*time.Second, func() {
		for _, name := range []string{"writer-worker", "mapper-worker", "ingest-api"} {
			s.kill(t, name, os.Interrupt) // SIGINT: the same graceful path as SIGTERM
			s.start(name)
			time.Sleep(3 * time.Second)
		}
	})
	reconcile(t, s, "graceful-restarts", l)
}

func TestChaosNATSRestarted(t *testing.T) {
	if !chaosFull() {
		t.Skip("CHAOS_FULL: make chaos")
	}
	s := startStack(t, chaosEnv...)
	provisionChaos(t, s)
	l := underLoad(t, s, 20*time.Second, 5*time.Second, func() {
		s.nats.Stop()
		time.Sleep(300 * time.Millisecond)
		// A request that arrives while NATS is down is answered at once.
		// (Requests already in flight may wait and succeed: their events
		// are on disk in the stream.)
		start := time.Now()
		r := s.post(t, `{"serial":"chaos-0","data":{"v":-1}}`, bearer("chaos-tok-5f0c2b9e71d4-0"))
		expect(t, r, 503, "Failed to process message", r.Body["error"].(string))
		if took := time.Since(start); took > time.Second {
			t.Errorf("answer while NATS is down took %v", took)
		}
		time.Sleep(2700 * time.Millisecond)
		s.nats.Start()
	})
	reconcile(t, s, "nats-restart", l)
	if n := storedValues(t, s)[-1]; n != 0 {
		t.Errorf("the reading answered 503 while NATS was down was stored %d times", n)
	}
}

func TestChaosClickHouseStopped(t *testing.T) {
	if !chaosFull() {
		t.Skip("CHAOS_FULL: make chaos")
	}
	ch := startOwnClickHouse(t)
	s := startStackOn(t, ch.addr, chaosEnv...)
	provisionChaos(t, s)
	l := underLoad(t, s, 25*time.Second, 5*time.Second, func() {
		ch.stop(t)
		time.Sleep(10 * time.Second)
		ch.start(t)
	})
	if l.statuses["503"] == 0 {
		t.Errorf("no 503 while ClickHouse was down: %v", l.statuses)
	}
	reconcile(t, s, "clickhouse-stop-10s", l)
}

// ownClickHouse is a server of this test alone, so it can be stopped.
type ownClickHouse struct {
	script, dir, tcp, http, addr string
}

func startOwnClickHouse(t *testing.T) *ownClickHouse {
	t.Helper()
	return startOwnClickHouseIn(t, t.TempDir())
}

// startOwnClickHouseIn starts the server with all its files in dir.
func startOwnClickHouseIn(t *testing.T, dir string) *ownClickHouse {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	port := func() string {
		_, p, _ := net.SplitHostPort(freeAddr(t))
		return p
	}
	c := &ownClickHouse{script: filepath.Join(root, "deploy/clickhouse/server.sh"), dir: dir, tcp: port(), http: port()}
	c.addr = "127.0.0.1:" + c.tcp
	c.start(t)
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *ownClickHouse) start(t *testing.T) {
	if out, err := exec.Command(c.script, "start", c.dir, c.tcp, c.http).CombinedOutput(); err != nil {
		t.Fatalf("start clickhouse: %v %s", err, out)
	}
}

// kill ends the server at once (SIGKILL), as a power cut does.
func (c *ownClickHouse) kill(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(c.dir, "pid"))
	if err != nil {
		t.Fatalf("the ClickHouse server's pid: %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, syscall.SIGKILL) != nil {
		t.Fatalf("kill the ClickHouse server (pid %q)", b)
	}
	for end := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond) // gone, or a zombie its reaper has not seen yet
	}
}

func (c *ownClickHouse) stop(t *testing.T) {
	if out, err := exec.Command(c.script, "stop", c.dir).CombinedOutput(); err != nil {
		t.Logf("stop clickhouse: %v %s", err, out)
	}
}
