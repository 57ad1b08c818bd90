package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

const storedMsg = "Message processed and data stored successfully"

func keyHeader(tok, key string) map[string]string {
	h := bearer(tok)
	h["Idempotency-Key"] = key
	return h
}

// onlyValue is the value_json stored for entity, which must hold one row.
func (s *stack) onlyValue(t *testing.T, entity string) string {
	t.Helper()
	if n := s.count(t, "input_values WHERE entity = ?", entity); n != 1 {
		t.Fatalf("entity %s holds %d values, want 1", entity, n)
	}
	var v string
	if err := s.ch.QueryRow(context.Background(), "SELECT value_json FROM "+s.db+".input_values WHERE entity = ?", entity).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// retryUntilStored posts as a field device does: again on 503, as long as
// the stack progresses (testenv.WaitFor).
func (s *stack) retryUntilStored(t *testing.T, body string, header map[string]string) {
	t.Helper()
	testenv.WaitFor(t, "a retry stored", testenv.WaitStall, s.progress, s.dead, func() bool {
		r := s.post(t, body, header)
		if r.Status == 200 {
			expect(t, r, 200, storedMsg, "")
			return true
		}
		if r.Status != 503 {
			t.Fatalf("retry: %d %s", r.Status, r.Raw)
		}
		time.Sleep(200 * time.Millisecond) // a device's pace
		return false
	})
}

func TestIdempotencyKey(t *testing.T) {
	s := startStack(t, "OUTCOME_TIMEOUT=1500ms", "RETRY_MAX_DELAY=400ms")
	put := func(serial, entity string) {
		s.admin(t, http.MethodPut, "/devices/"+serial, `{"accessToken":"tok-5f0c2b9e71d4-`+serial+`","inputs":[{"name":"t","entity":"`+entity+`","entityInput":"t"}]}`)
	}
	put("dev-K", "ik")
	put("dev-K2", "ik2")

	t.Run("a retry gets the first outcome and stores nothing", func(t *testing.T) {
		expect(t, s.post(t, `{"serial":"dev-K","data":{"t":1}}`, keyHeader("tok-5f0c2b9e71d4-dev-K", "key-1")), 200, storedMsg, "")
		expect(t, s.post(t, `{"serial":"dev-K","data":{"t":2}}`, keyHeader("tok-5f0c2b9e71d4-dev-K", "key-1")), 200, storedMsg, "")
		if v := s.onlyValue(t, "ik"); v != "1" {
			t.Fatalf("stored %s, want the first attempt's 1", v)
		}
		// The same key from another device is another reading.
		expect(t, s.post(t, `{"serial":"dev-K2","data":{"t":3}}`, keyHeader("tok-5f0c2b9e71d4-dev-K2", "key-1")), 200, storedMsg, "")
		if v := s.onlyValue(t, "ik2"); v != "3" {
			t.Fatalf("other device stored %s, want 3", v)
		}
		// A new key is a new reading.
		expect(t, s.post(t, `{"serial":"dev-K","data":{"t":4}}`, keyHeader("tok-5f0c2b9e71d4-dev-K", "key-2")), 200, storedMsg, "")
		if n := s.count(t, "input_values WHERE entity = 'ik'"); n != 2 {
			t.Fatalf("%d values after a new key, want 2", n)
		}
	})

	t.Run("concurrent retries store once", func(t *testing.T) {
		put("dev-KC", "ikc")
		var wg sync.WaitGroup
		replies := make([]reply, 20)
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i] = s.post(t, `{"serial":"dev-KC","data":{"t":5}}`, keyHeader("tok-5f0c2b9e71d4-dev-KC", "key-c"))
			}()
		}
		wg.Wait()
		for _, r := range replies {
			expect(t, r, 200, storedMsg, "")
		}
		s.onlyValue(t, "ikc")
	})

	t.Run("no connections is the answer to its retries", func(t *testing.T) {
		s.admin(t, http.MethodPut, "/devices/dev-KN", `{"accessToken":"tok-5f0c2b9e71d4-dev-KN","inputs":[{"name":"t"}]}`)
		expect(t, s.post(t, `{"serial":"dev-KN","data":{"t":6}}`, keyHeader("tok-5f0c2b9e71d4-dev-KN", "key-n")), 422, "No connections configured", "No connections found for this device")
		put("dev-KN", "ikn")
		expect(t, s.post(t, `{"serial":"dev-KN","data":{"t":6}}`, keyHeader("tok-5f0c2b9e71d4-dev-KN", "key-n")), 422, "No connections configured", "No connections found for this device")
		if n := s.count(t, "input_values WHERE entity = 'ikn'"); n != 0 {
			t.Fatalf("the retry stored %d values", n)
		}
	})

	t.Run("a lost answer: the retry learns the event was stored", func(t *testing.T) {
		put("dev-KL", "ikl")
		s.kill(t, "writer-worker", os.Kill)
		r := s.post(t, `{"serial":"dev-KL","data":{"t":7}}`, keyHeader("tok-5f0c2b9e71d4-dev-KL", "key-l"))
		expect(t, r, 503, "Failed to process message", "timed out waiting for the storage outcome")
		s.start("writer-worker")
		s.retryUntilStored(t, `{"serial":"dev-KL","data":{"t":8}}`, keyHeader("tok-5f0c2b9e71d4-dev-KL", "key-l"))
		if v := s.onlyValue(t, "ikl"); v != "7" {
			t.Fatalf("stored %s, want the first attempt's 7", v)
		}
	})

	t.Run("a retry while the outcomes cannot be read is answered as a storage failure", func(t *testing.T) {
		put("dev-KR", "ikr")
		expect(t, s.post(t, `{"serial":"dev-KR","data":{"t":11}}`, keyHeader("tok-5f0c2b9e71d4-dev-KR", "key-r")), 200, storedMsg, "")
		ctx := context.Background()
		if err := s.ch.Exec(ctx, "DROP TABLE "+s.db+".event_keys"); err != nil {
			t.Fatal(err)
		}
		r := s.post(t, `{"serial":"dev-KR","data":{"t":12}}`, keyHeader("tok-5f0c2b9e71d4-dev-KR", "key-r"))
		if r.Status != 503 || r.Body["message"] != "Message processed but failed to store data" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("retry with event_keys unreadable: %d %s", r.Status, r.Raw)
		}
		for _, stmt := range schema.Statements(s.db) {
			if err := s.ch.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if v := s.onlyValue(t, "ikr"); v != "11" {
			t.Fatalf("stored %s, want the first attempt's 11", v)
		}
	})

	t.Run("a storage failure: the event is stored once ClickHouse is back, and the retry says so", func(t *testing.T) {
		put("dev-KF", "ikf")
		ctx := context.Background()
		if err := s.ch.Exec(ctx, "DROP TABLE "+s.db+".input_values"); err != nil {
			t.Fatal(err)
		}
		r := s.post(t, `{"serial":"dev-KF","data":{"t":9}}`, keyHeader("tok-5f0c2b9e71d4-dev-KF", "key-f"))
		if r.Status != 503 || r.Body["message"] != "Message processed but failed to store data" {
			t.Fatalf("with the table gone: %d %s", r.Status, r.Raw)
		}
		for _, stmt := range schema.Statements(s.db) {
			if err := s.ch.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		s.retryUntilStored(t, `{"serial":"dev-KF","data":{"t":10}}`, keyHeader("tok-5f0c2b9e71d4-dev-KF", "key-f"))
		if v := s.onlyValue(t, "ikf"); v != "9" {
			t.Fatalf("stored %s, want the first attempt's 9", v)
		}
	})
}

// Past the pipeline window (its claim gone) a retry travels the whole
// pipeline: the writer finds the first outcome in event_keys. The window's
// passing is played by purging the claims and starting the writer again:
// a writer that ran through the window holds the claim in its filter of
// keys seen (idem.Seen), one started after it has event_keys' row there.
func TestIdempotencyKeyPastThePipelineWindow(t *testing.T) {
	s := startStack(t)
	s.admin(t, http.MethodPut, "/devices/dev-KW", `{"accessToken":"tok-5f0c2b9e71d4-KW","inputs":[{"name":"t","entity":"ikw","entityInput":"t"}]}`)
	expect(t, s.post(t, `{"serial":"dev-KW","data":{"t":1}}`, keyHeader("tok-5f0c2b9e71d4-KW", "key-w")), 200, storedMsg, "")
	eventually(t, 10*time.Second, func() bool { return s.count(t, "event_keys") == 1 })
	// The window passing, without waiting bus.PipelineWindow: the claims go.
	js := testenv.OperatorJS(t, s.nats.Server().ClientURL())
	st, err := js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.kill(t, "writer-worker", os.Interrupt)
	s.start("writer-worker")
	s.waitOpsReady(t, "writer-worker", s.ops["writer-worker"])
	expect(t, s.post(t, `{"serial":"dev-KW","data":{"t":2}}`, keyHeader("tok-5f0c2b9e71d4-KW", "key-w")), 200, storedMsg, "")
	time.Sleep(700 * time.Millisecond) // the raw log's interval
	if v := s.onlyValue(t, "ikw"); v != "1" {
		t.Fatalf("stored %s, want the first attempt's 1", v)
	}
	if n := s.count(t, "device_messages WHERE serial = 'dev-KW'"); n != 1 {
		t.Fatalf("%d raw messages, want 1", n)
	}
}

// A retry that reaches another ingest-api copy while the first attempt is
// still in the pipeline finds the first attempt's claim: its events go out
// with its claims log entry, which holds nothing, and the writer drops them
// and releases that entry's claim; once the first is stored its retries
// are answered stored, with the first body the one stored. The writer
// starts after both entries were written: it tells what they hold from
// the entries the stream keeps (bus.ClaimsKept).
func TestKeyedRetryOnAnotherCopyWhileTheFirstIsInFlight(t *testing.T) {
	ns := testenv.NATSControl(t)
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL(), "OUTCOME_TIMEOUT=20s")
	s.nats = ns
	second := "http://" + freeAddr(t)
	s.bases = append(s.bases, second)
	s.start("writer-worker")
	s.start("mapper-worker")
	s.start("ingest-api")
	s.start("ingest-api.2", "HTTP_ADDR="+strings.TrimPrefix(second, "http://"))
	s.waitReady()
	s.kill(t, "writer-worker", os.Interrupt)
	s.admin(t, http.MethodPut, "/devices/dev-KF", `{"accessToken":"tok-5f0c2b9e71d4-KF","inputs":[{"name":"t","entity":"ikf","entityInput":"t"}]}`)

	js := testenv.OperatorJS(t, ns.Server().ClientURL())
	msgs := func(stream string) uint64 {
		st, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.Msgs
	}

	// No writer: the first attempt is mapped and waits in the stream.
	first := make(chan reply, 1)
	go func() {
		first <- s.post(t, `{"serial":"dev-KF","data":{"t":1}}`, keyHeader("tok-5f0c2b9e71d4-KF", "key-f"))
	}()
	eventually(t, 10*time.Second, func() bool { return msgs(bus.DefaultNames.MappedStream) == 1 })
	if n := msgs(bus.DefaultNames.ClaimsStream); n != 1 {
		t.Fatalf("%d claims log entries, want 1", n)
	}

	// The retry, on the other copy, is told to retry later (no writer can
	// say how the first ended); its events wait in the stream beside the
	// first's, with its claims log entry.
	other := *s
	other.base = second
	r := other.post(t, `{"serial":"dev-KF","data":{"t":2}}`, keyHeader("tok-5f0c2b9e71d4-KF", "key-f"))
	expect(t, r, 503, "Failed to process message", r.Body["error"].(string))
	s.waitConsumed(t, bus.DefaultNames.EventsStream, bus.DefaultNames.MapperConsumer)
	if ev, mp, cl := msgs(bus.DefaultNames.EventsStream), msgs(bus.DefaultNames.MappedStream), msgs(bus.DefaultNames.ClaimsStream); ev != 0 || mp != 2 || cl != 2 {
		t.Fatalf("after the retry: %d events, %d envelopes, %d claims log messages; want 0, 2, 2", ev, mp, cl)
	}

	// With a writer again the first attempt is stored, and so answered;
	// the retry's events are dropped and its entry's claim released (a
	// third message in the log); a retry on either copy learns the first
	// outcome.
	s.start("writer-worker")
	expect(t, <-first, 200, storedMsg, "")
	eventually(t, 10*time.Second, func() bool { return msgs(bus.DefaultNames.ClaimsStream) == 3 })
	expect(t, other.post(t, `{"serial":"dev-KF","data":{"t":3}}`, keyHeader("tok-5f0c2b9e71d4-KF", "key-f")), 200, storedMsg, "")
	expect(t, s.post(t, `{"serial":"dev-KF","data":{"t":4}}`, keyHeader("tok-5f0c2b9e71d4-KF", "key-f")), 200, storedMsg, "")
	if v := s.onlyValue(t, "ikf"); v != "1" {
		t.Fatalf("stored %s, want the first attempt's 1", v)
	}
}

// A first attempt costs no read of event_keys: the writer's filter of keys
// seen knows it; a retry is still looked up, and stored once.
func TestFirstAttemptsAreNotLookedUp(t *testing.T) {
	s := startStack(t)
	s.admin(t, http.MethodPut, "/devices/dev-FA", `{"accessToken":"tok-5f0c2b9e71d4-FA","inputs":[{"name":"t","entity":"ifa","entityInput":"t"}]}`)
	hdr := func(key string) map[string]string { return keyHeader("tok-5f0c2b9e71d4-FA", key) }
	counts := func() (firsts, lookups float64) {
		m := s.scrape(t, "writer-worker")
		return m["writer_worker_keyed_first_attempts_total"], m["writer_worker_key_lookups_total"]
	}
	// Until the filter is complete (it reads event_keys at start) keyed
	// events are looked up.
	for i := 0; ; i++ {
		expect(t, s.post(t, `{"serial":"dev-FA","data":{"t":0}}`, hdr(fmt.Sprintf("warm-%d", i))), 200, storedMsg, "")
		if f, _ := counts(); f >= 1 {
			break
		}
		if i == 50 {
			t.Fatal("no keyed event was known for a first attempt after 50 posts")
		}
		time.Sleep(100 * time.Millisecond)
	}
	f0, l0 := counts()
	for i := range 20 {
		expect(t, s.post(t, `{"serial":"dev-FA","data":{"t":1}}`, hdr(fmt.Sprintf("first-%d", i))), 200, storedMsg, "")
	}
	f1, l1 := counts()
	if f1-f0 != 20 || l1 != l0 {
		t.Fatalf("20 first attempts: %v known, %v lookups; want 20 and 0", f1-f0, l1-l0)
	}
	expect(t, s.post(t, `{"serial":"dev-FA","data":{"t":2}}`, hdr("first-3")), 200, storedMsg, "")
	if _, l2 := counts(); l2 <= l1 {
		t.Fatal("a retry was not looked up")
	}
	time.Sleep(700 * time.Millisecond) // the raw log's interval
	if n := s.count(t, "input_values WHERE entity = 'ifa' AND value_json = '2'"); n != 0 {
		t.Fatalf("the retry stored %d values", n)
	}
}
