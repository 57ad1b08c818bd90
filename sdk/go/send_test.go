package devicesdk

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is a stand-in for the service in unit tests: it records each
// request and answers as answer says.
type fake struct {
	mu     sync.Mutex
	reqs   []fakeReq
	answer func(r fakeReq) (status int, header map[string]string, body string)
}

type fakeReq struct {
	Token, Key string
	Serial     string
	Messages   []struct {
		TS   string          `json:"ts"`
		Data json.RawMessage `json:"data"`
	}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fr fakeReq
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &fr)
	fr.Token, fr.Key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.reqs = append(f.reqs, fr)
	f.mu.Unlock()
	status, h, body := f.answer(fr)
	for k, v := range h {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (f *fake) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}

const storedAnswer = `{"success":true,"message":"Message processed and data stored successfully"}`

// client opens a Client on a fake; Run stops after stopAfter waits, each
// recorded.
func client(t *testing.T, f *fake, cfg Config, stopAfter int) (*Client, *[]time.Duration, func()) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg.URL, cfg.Serial, cfg.Dir = srv.URL, "dev-1", t.TempDir()
	if cfg.Token == "" {
		cfg.Token = "tok-primary"
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) bool {
		waits = append(waits, d)
		if len(waits) >= stopAfter {
			cancel()
		}
		return ctx.Err() == nil
	}
	run := func() {
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		for c.Status().Queued > 0 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
	}
	return c, &waits, run
}

func recordValues(t *testing.T, c *Client, n int) {
	t.Helper()
	rs := make([]Reading, n)
	for i := range rs {
		rs[i] = Reading{Data: map[string]any{"v": i}, Time: time.Date(2026, 11, 26, 10, 0, i, 5e6, time.UTC)}
	}
	if err := c.RecordAll(rs); err != nil {
		t.Fatal(err)
	}
}

func TestSendStoresABatch(t *testing.T) {
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 200, nil, storedAnswer }}
	c, _, run := client(t, f, Config{}, 100)
	recordValues(t, c, 3)
	run()
	s := c.Status()
	if s.Stored != 3 || s.Sent != 3 || s.Queued != 0 || len(f.requests()) != 1 {
		t.Fatalf("status %+v, %d requests", s, len(f.requests()))
	}
	r := f.requests()[0]
	if r.Token != "tok-primary" || r.Serial != "dev-1" || !strings.HasSuffix(r.Key, "-1-3") || len(r.Key) != 32+4 ||
		len(r.Messages) != 3 || r.Messages[1].TS != "2026-11-26T10:00:01.005Z" || string(r.Messages[2].Data) != `{"v":2}` {
		t.Fatalf("request %+v", r)
	}
}

func TestSendReadsResultsOneByOne(t *testing.T) {
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) {
		return 200, nil, `{"success":false,"message":"Some messages were not stored","error":"1 of 2 messages were not stored",` +
			`"results":[{"success":true,"message":"Message processed and data stored successfully"},` +
			`{"success":false,"message":"No connections configured","error":"No connections configured for device with serial dev-1"}]}`
	}}
	c, _, run := client(t, f, Config{}, 100)
	recordValues(t, c, 2)
	run()
	if s := c.Status(); s.Stored != 1 || s.Refused["No connections configured"] != 1 || s.Queued != 0 {
		t.Fatalf("status %+v", s)
	}
}

// 413 splits the batch until it fits; each part has a key of its own.
func TestSendSplitsWhatIsTooLarge(t *testing.T) {
	f := &fake{answer: func(r fakeReq) (int, map[string]string, string) {
		if len(r.Messages) > 2 {
			return 413, nil, `{"success":false,"message":"Payload too large","error":"Too many messages in one request (at most 2)"}`
		}
		return 200, nil, storedAnswer
	}}
	c, waits, run := client(t, f, Config{}, 100)
	recordValues(t, c, 5)
	run()
	keys := map[string]bool{}
	stored := 0
	for _, r := range f.requests() {
		if len(r.Messages) <= 2 {
			stored += len(r.Messages)
			keys[r.Key] = true
		}
	}
	if s := c.Status(); s.Stored != 5 || stored != 5 || len(keys) != 3 || len(*waits) != 0 {
		t.Fatalf("status %+v, %d stored in %d keys, waits %v", s, stored, len(keys), *waits)
	}
}

func TestSendTriesTheSecondaryTokenThenWaits(t *testing.T) {
	var failures []int
	f := &fake{answer: func(r fakeReq) (int, map[string]string, string) {
		if r.Token != "tok-secondary" {
			return 401, nil, `{"success":false,"message":"Invalid access token","error":"Invalid access token for device with serial dev-1"}`
		}
		return 200, nil, storedAnswer
	}}
	c, waits, run := client(t, f, Config{SecondaryToken: "tok-secondary", OnAuthFailure: func(s int) { failures = append(failures, s) }}, 100)
	recordValues(t, c, 1)
	run()
	if s := c.Status(); s.Stored != 1 || !s.ActiveSecond || len(failures) != 1 || len(*waits) != 0 {
		t.Fatalf("status %+v, failures %v, waits %v", s, failures, *waits)
	}

	f2 := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 403, nil, `{"success":false}` }}
	c2, waits2, run2 := client(t, f2, Config{}, 2)
	recordValues(t, c2, 1)
	run2()
	if len(*waits2) != 2 || (*waits2)[0] != 5*time.Minute || len(f2.requests()) != 2 {
		t.Fatalf("without a secondary: waits %v after %d requests, want 5m each", *waits2, len(f2.requests()))
	}
}

// Retry-After is honoured up to an hour, the same batch is sent again with
// the same key, and nothing is sent while waiting.
func TestSendWaitsAsTold(t *testing.T) {
	n := 0
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) {
		if n++; n <= 2 {
			return 503, map[string]string{"Retry-After": []string{"7200", "30"}[n-1]},
				`{"success":false,"message":"Message processed but failed to store data","error":"storage error: down"}`
		}
		return 200, nil, storedAnswer
	}}
	c, waits, run := client(t, f, Config{}, 100)
	recordValues(t, c, 4)
	run()
	if len(*waits) != 2 || (*waits)[0] != time.Hour || (*waits)[1] != 30*time.Second {
		t.Fatalf("waits %v, want 1h then 30s", *waits)
	}
	if len(f.requests()) != 3 || f.requests()[0].Key != f.requests()[2].Key || len(f.requests()[2].Messages) != 4 || c.Status().Stored != 4 {
		t.Fatalf("%d requests, keys %q %q", len(f.requests()), f.requests()[0].Key, f.requests()[len(f.requests())-1].Key)
	}
}

// A server that never answers costs a request its timeout, then the
// back-off: the SDK neither hangs nor spins.
func TestSendTimesOutAHangingServer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) { <-release; return 200, nil, storedAnswer }}
	c, waits, run := client(t, f, Config{RequestTimeout: 100 * time.Millisecond, BaseBackoff: time.Second}, 3)
	recordValues(t, c, 1)
	start := time.Now()
	run()
	if took := time.Since(start); len(f.requests()) != 3 || took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("%d requests in %v", len(f.requests()), took)
	}
	for i, d := range *waits {
		if d >= time.Second<<i {
			t.Fatalf("wait %d: %v above its ceiling", i, d)
		}
	}
	if s := c.Status(); s.LastStatus != 0 || !strings.Contains(s.LastError, "deadline") || s.Stored != 0 || s.Queued != 1 {
		t.Fatalf("status %+v", s)
	}
}
