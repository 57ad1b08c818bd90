package integration

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/writer-worker/schema"
)

func TestStorageFailureIsReportedAndRecovers(t *testing.T) {
	s := startStack(t)
	s.admin(t, http.MethodPut, "/devices/dev-F", `{"accessToken":"tok-5f0c2b9e71d4-F-1","inputs":[{"name":"t","entity":"f","entityInput":"t"}]}`)
	expect(t, s.post(t, `{"serial":"dev-F","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-F-1")), 200, "Message processed and data stored successfully", "")

	ctx := context.Background()
	if err := s.ch.Exec(ctx, "DROP TABLE "+s.db+".input_values"); err != nil {
		t.Fatal(err)
	}
	r := s.post(t, `{"serial":"dev-F","data":{"t":2}}`, bearer("tok-5f0c2b9e71d4-F-1"))
	if r.Status != 503 || r.Body["success"] != false || r.Body["message"] != "Message processed but failed to store data" {
		t.Fatalf("with the table gone: %d %s", r.Status, r.Raw)
	}
	if e, _ := r.Body["error"].(string); !strings.HasPrefix(e, "storage error: ") {
		t.Errorf("error = %q, want the storage error", e)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a retryable failure")
	}
	conformEvent(t, r)

	// ClickHouse comes back (here: the table); no program is restarted.
	for _, stmt := range schema.Statements(s.db) {
		if err := s.ch.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, s.post(t, `{"serial":"dev-F","data":{"t":3}}`, bearer("tok-5f0c2b9e71d4-F-1")), 200, "Message processed and data stored successfully", "")
	// The failed reading was not stored later behind the device's back:
	// counted once the writer has settled every message it was given.
	s.waitConsumed(t, namesIn(s.env).MappedStream, namesIn(s.env).WriterConsumer)
	if n := s.count(t, "input_values WHERE entity = 'f'"); n != 1 {
		t.Fatalf("after recovery %d values, want only the one stored after it", n)
	}
}

func TestOutcomeTimeoutAndRestart(t *testing.T) {
	// A killed mapper may have had the event delivered to its dead pull
	// request: it comes back after ACK_WAIT.
	s := startStack(t, "OUTCOME_TIMEOUT=400ms", "ACK_WAIT=2s", "INSERT_TIMEOUT=1s")
	s.admin(t, http.MethodPut, "/devices/dev-T", `{"accessToken":"tok-5f0c2b9e71d4-T-1","inputs":[{"name":"t","entity":"tm","entityInput":"t"}]}`)
	expect(t, s.post(t, `{"serial":"dev-T","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-T-1")), 200, "Message processed and data stored successfully", "")

	mapper := s.procs["mapper-worker"]
	if err := mapper.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	_ = mapper.Wait()
	start := time.Now()
	r := s.post(t, `{"serial":"dev-T","data":{"t":2}}`, bearer("tok-5f0c2b9e71d4-T-1"))
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("answer took %v with a 400ms outcome timeout", took)
	}
	expect(t, r, 503, "Failed to process message", "timed out waiting for the storage outcome")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a timeout")
	}

	s.start("mapper-worker")
	// The event already in the stream is processed once the mapper is back.
	eventually(t, 20*time.Second, func() bool { return s.count(t, "input_values WHERE entity = 'tm'") == 2 })
	expect(t, s.post(t, `{"serial":"dev-T","data":{"t":3}}`, bearer("tok-5f0c2b9e71d4-T-1")), 200, "Message processed and data stored successfully", "")
	if n := s.count(t, "input_values WHERE entity = 'tm'"); n != 3 {
		t.Fatalf("%d values, want 3", n)
	}
}

func TestDeviceRateLimit(t *testing.T) {
	// A token every 50 s: a busy machine's slow answers refill no bucket
	// within the test.
	s := startStack(t, "DEVICE_RATE=0.02", "DEVICE_BURST=2")
	for _, d := range []string{"dev-R1", "dev-R2"} {
		s.admin(t, http.MethodPut, "/devices/"+d, `{"accessToken":"tok-5f0c2b9e71d4-`+d+`","inputs":[{"name":"t","entity":"rl","entityInput":"t"}]}`)
	}
	for range 2 {
		expect(t, s.post(t, `{"serial":"dev-R1","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-dev-R1")), 200, "Message processed and data stored successfully", "")
	}
	r := s.post(t, `{"serial":"dev-R1","data":{"t":2}}`, bearer("tok-5f0c2b9e71d4-dev-R1"))
	expect(t, r, 429, "Rate limit exceeded", "Too many requests for device with serial dev-R1")
	if r.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	conformEvent(t, r)
	// Failed authentication spends no device budget, and devices are apart.
	expect(t, s.post(t, `{"serial":"dev-R2","data":{"t":1}}`, bearer("wrong")), 401, "Invalid access token", "Invalid access token for device with serial dev-R2")
	spent := time.Now()
	expect(t, s.post(t, `{"serial":"dev-R2","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-dev-R2")), 200, "Message processed and data stored successfully", "")
	// A backlog counts its readings: two messages need two tokens, and
	// dev-R2 has one left (the second comes 50 s after the post at
	// 0.02/s, less what passed since: Retry-After rounds it up).
	r = s.postBacklog(t, `{"serial":"dev-R2","messages":[{"data":{"t":5}},{"data":{"t":6}}]}`, bearer("tok-5f0c2b9e71d4-dev-R2"))
	expect(t, r, 429, "Rate limit exceeded", "Too many requests for device with serial dev-R2")
	lo := int(math.Ceil((50*time.Second - time.Since(spent)).Seconds()))
	if got, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || got < lo || got > 50 {
		t.Errorf("Retry-After %q for a backlog one token short at 0.02/s, want %d to 50", r.Header.Get("Retry-After"), lo)
	}
	if n := s.count(t, "input_values WHERE entity = 'rl'"); n != 3 {
		t.Fatalf("%d values stored, want 3 (the limited readings are not stored)", n)
	}
}

// A device is held to its rate across ingest-api copies: the copies share
// what they granted (every 250 ms), so a device that spent its burst on
// one copy is refused by the other, instead of getting a burst per copy.
func TestDeviceRateLimitAcrossCopies(t *testing.T) {
	// A token every 50 s: a busy machine's slow answers refill no bucket
	// within the test.
	s := startStack(t, "DEVICE_RATE=0.02", "DEVICE_BURST=3")
	second := freeAddr(t)
	s.start("ingest-api.2", "HTTP_ADDR="+second)
	s.bases = append(s.bases, "http://"+second)
	s.waitReady()
	s.admin(t, http.MethodPut, "/devices/dev-X", `{"accessToken":"tok-5f0c2b9e71d4-dev-X","inputs":[{"name":"t","entity":"rlx","entityInput":"t"}]}`)
	postTo := func(base string, v int) reply {
		first := s.base
		s.base = base
		defer func() { s.base = first }()
		return s.post(t, fmt.Sprintf(`{"serial":"dev-X","data":{"t":%d}}`, v), bearer("tok-5f0c2b9e71d4-dev-X"))
	}
	for i := range 3 {
		expect(t, postTo(s.bases[0], i), 200, storedMsg, "")
	}
	time.Sleep(600 * time.Millisecond) // the first copy has shared what it granted
	r := postTo(s.bases[1], 9)
	expect(t, r, 429, "Rate limit exceeded", "Too many requests for device with serial dev-X")
	if n := s.count(t, "input_values WHERE entity = 'rlx'"); n != 3 {
		t.Fatalf("%d values stored, want 3: the second copy granted a burst of its own", n)
	}
}
