package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/retry"
)

// The fault of issue 33: every keyed reading is sent to two ingest-api
// copies at the same moment (a device whose retry reaches another copy
// before the first attempt is answered, at its worst), while one of two
// writers is killed and restarted. Each copy's client retries with the same
// key until it is answered stored. Each reading must be stored exactly once.

// twinPairs is how many readings are in flight at once (twice as many
// requests).
const twinPairs = 24

// twinBackoff is the clients' retry: with the same key, on a 503 (waiting
// its Retry-After) or a lost connection; the field firmware's schedule
// (30 s to 240 s) shortened to the test's length, bounded as it is.
var twinBackoff = retry.Backoff{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Tries: 30, MaxElapsed: 2 * time.Minute}

// twins is the load: reading i is the value i from device chaos-(i mod 8)
// with the key twin-key-i, sent to copy 0 and copy 1.
type twins struct {
	client *http.Client
	mu     sync.Mutex
	sent   int
	// retries are requests sent again after an answer other than stored.
	retries  int
	statuses map[string]int
	answers  [][2][]string      // per reading and copy, every answer in order
	stored   [][2]bool          // per reading and copy: answered stored
	first    [][2]time.Duration // per reading and copy: the first attempt's answer time
}

func newTwins(readings int) *twins {
	return &twins{
		client:   &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: twinPairs}},
		statuses: map[string]int{},
		answers:  make([][2][]string, readings),
		stored:   make([][2]bool, readings),
		first:    make([][2]time.Duration, readings),
	}
}

// run sends every reading, twinPairs at a time, and closes midway once
// reading killAt is taken.
func (tw *twins) run(bases []string, killAt int, midway chan<- struct{}) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range twinPairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				tw.pair(bases, i)
			}
		}()
	}
	for i := range tw.answers {
		if i == killAt {
			close(midway)
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// pair sends reading i to both copies, released together.
func (tw *twins) pair(bases []string, i int) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			tw.deliver(bases[c], i, c)
		}()
	}
	close(release)
	wg.Wait()
}

// deliver sends reading i to one copy until it is answered stored, or the
// back-off gives up, or the answer is one a retry cannot change.
func (tw *twins) deliver(base string, i, c int) {
	_ = twinBackoff.Do(context.Background(), func(context.Context) error {
		status, answer, wait, took := tw.post(base, i)
		tw.mu.Lock()
		defer tw.mu.Unlock()
		if len(tw.answers[i][c]) == 0 {
			tw.first[i][c] = took
		}
		tw.sent++
		tw.statuses[status]++
		tw.answers[i][c] = append(tw.answers[i][c], answer)
		switch status {
		case "200":
			tw.stored[i][c] = true
			return nil
		case "503":
			return failure.AsThrottled(errors.New(answer), wait)
		case "conn_error":
			return errors.New(answer)
		}
		return failure.AsPermanent(errors.New(answer))
	}, func(int, error, time.Duration) {
		tw.mu.Lock()
		tw.retries++
		tw.mu.Unlock()
	})
}

// post sends reading i to base once: the answer's status ("200" only when
// it says stored, "conn_error" when there was none), the answer in short
// for a report, its Retry-After, and how long it took.
func (tw *twins) post(base string, i int) (status, answer string, wait, took time.Duration) {
	dev := i % chaosDevices
	body := fmt.Sprintf(`{"serial":"chaos-%d","data":{"v":%d}}`, dev, i)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/deviceapi/event", strings.NewReader(body))
	req.Header.Set("Authorization", fmt.Sprintf("Bearer chaos-tok-5f0c2b9e71d4-%d", dev))
	req.Header.Set("Idempotency-Key", fmt.Sprintf("twin-key-%d", i))
	start := time.Now()
	resp, err := tw.client.Do(req)
	took = time.Since(start).Round(time.Millisecond)
	if err != nil {
		return "conn_error", fmt.Sprintf("%v after %v", err, took), 0, took
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	status = strconv.Itoa(resp.StatusCode)
	if resp.StatusCode == 200 && !bytes.Contains(b.Bytes(), []byte(`"success":true`)) {
		status = "200_not_stored"
	}
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return status, fmt.Sprintf("%d %s after %v", resp.StatusCode, bytes.TrimSpace(b.Bytes()), took), time.Duration(secs) * time.Second, took
}

// latencies are the medians and 99th percentiles of the first attempts'
// answer times, the faster of each pair's two and the slower.
func (tw *twins) latencies() string {
	var fast, slow []time.Duration
	for _, f := range tw.first {
		fast, slow = append(fast, min(f[0], f[1])), append(slow, max(f[0], f[1]))
	}
	q := func(d []time.Duration, p float64) time.Duration {
		slices.Sort(d)
		return d[int(p*float64(len(d)-1))]
	}
	return fmt.Sprintf("faster of each pair p50 %v p99 %v, slower p50 %v p99 %v", q(fast, 0.5), q(fast, 0.99), q(slow, 0.5), q(slow, 0.99))
}

// load is the twins' figures in the form reconcile's verdict takes: a
// reading succeeded when either copy answered it stored.
func (tw *twins) load() *load {
	l := &load{sent: tw.sent, retries: tw.retries, succeeded: map[int]time.Time{}, statuses: tw.statuses}
	for i, st := range tw.stored {
		if st[0] || st[1] {
			l.succeeded[i] = time.Now()
		}
	}
	return l
}

// twinStack is one JetStream with two writers, one mapper and two
// ingest-api copies, each its own address, the chaos devices provisioned.
func twinStack(t *testing.T) *stack {
	t.Helper()
	ns := testenv.NATSControlFor(t, namesIn(chaosEnv))
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL(), chaosEnv...)
	s.nats = ns
	for _, p := range []string{"writer-worker", "writer-worker.2", "mapper-worker", "ingest-api"} {
		s.start(p)
	}
	s.waitReady()
	provisionChaos(t, s)
	// Started after provisioning: ready, it knows every device.
	second := freeAddr(t)
	s.bases = append(s.bases, "http://"+second)
	s.start("ingest-api.2", "HTTP_ADDR="+second)
	s.waitReady()
	for name, addr := range s.ops {
		s.waitOpsReady(t, name, addr)
	}
	return s
}

func TestChaosKeyedTwinsAcrossCopies(t *testing.T) {
	readings := 1000
	if !chaosFull() {
		readings = 150
	}
	s := twinStack(t)
	tw := newTwins(readings)
	midway, done := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() { defer close(done); tw.run(s.bases, readings*2/5, midway) }()
	<-midway
	killed := time.Since(start)
	s.kill(t, "writer-worker", os.Kill)
	time.Sleep(time.Second)
	s.start("writer-worker")
	<-done
	t.Logf("load: %v, writer-worker killed at %v; first attempts answered: %s", time.Since(start).Round(time.Millisecond), killed.Round(time.Millisecond), tw.latencies())

	// Nothing left in flight: whatever the killed writer held was
	// redelivered and settled.
	s.waitConsumed(t, bus.DefaultNames.EventsStream, bus.DefaultNames.MapperConsumer)
	s.waitConsumed(t, bus.DefaultNames.MappedStream, bus.DefaultNames.WriterConsumer)
	counts := settled(t, s)
	tw.report(t, s, counts)
	verdict(t, "keyed-twins-writer-sigkill", tw.load(), counts)
	// The writer that was not killed kept storing.
	if n := s.scrape(t, "writer-worker.2")[`writer_worker_rows_stored_total{table="input_values"}`]; n == 0 {
		t.Errorf("writer-worker.2 stored nothing")
	}
}

// report fails for every reading that is stored twice, answered stored but
// not stored, or never answered stored, with each copy's answers and the
// rows stored for it; and logs how the twins were answered.
func (tw *twins) report(t *testing.T, s *stack, counts map[int]uint64) {
	t.Helper()
	both, storedUnanswered, firstBoth := 0, 0, 0
	for i, st := range tw.stored {
		answered := st[0] || st[1]
		if st[0] && st[1] {
			both++
		}
		if len(tw.answers[i][0]) == 1 && len(tw.answers[i][1]) == 1 && st[0] && st[1] {
			firstBoth++
		}
		if !answered && counts[i] > 0 {
			storedUnanswered++
		}
		if counts[i] != 1 || !answered {
			t.Errorf("reading %d (serial chaos-%d, key twin-key-%d): stored %d times %v\n  copy 1 answered %q\n  copy 2 answered %q",
				i, i%chaosDevices, i, counts[i], rowsOf(t, s, i), tw.answers[i][0], tw.answers[i][1])
		}
	}
	for v := range counts {
		if v < 0 || v >= len(tw.stored) {
			t.Errorf("value %d stored that no client sent", v)
		}
	}
	for said, n := range tw.failures() {
		t.Logf("%d answers other than stored: %s", n, said)
	}
	t.Logf("twins: %d readings, %d answered stored on both copies (%d at the first attempt of each), %d stored though neither copy was answered stored",
		len(tw.stored), both, firstBoth, storedUnanswered)
}

// failures counts the answers other than stored by what they said.
func (tw *twins) failures() map[string]int {
	out := map[string]int{}
	for _, per := range tw.answers {
		for _, answers := range per {
			for _, a := range answers {
				if !strings.Contains(a, `"success":true`) {
					said, _, _ := strings.Cut(a, " after ")
					out[said]++
				}
			}
		}
	}
	return out
}

// rowsOf is the rows stored for reading i, in short.
func rowsOf(t *testing.T, s *stack, i int) []string {
	t.Helper()
	rows, err := s.ch.Query(context.Background(), "SELECT serial, event_id, ts_ns, received_ns FROM "+s.db+".input_values WHERE entity = 'chaos' AND value_json = ?", strconv.Itoa(i))
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var serial, id string
		var ts, recv int64
		if err := rows.Scan(&serial, &id, &ts, &recv); err != nil {
			return append(out, err.Error())
		}
		out = append(out, fmt.Sprintf("%s event %s ts_ns %d received_ns %d", serial, id, ts, recv))
	}
	return out
}
