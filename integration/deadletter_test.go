package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

// deadLetters runs `writer-worker dead-letters args...` against the stack's
// NATS and returns its JSON lines.
func (s *stack) deadLetters(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "writer-worker"), append([]string{"dead-letters"}, args...)...)
	// The operator's tool, as the operator's NATS user.
	cmd.Env = append(append([]string{}, s.env...), "NATS_USER=operator", "NATS_PASSWORD="+testenv.NATSPassword("operator"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("dead-letters %v: %v\n%s", args, err, errOut.String())
	}
	var lines []map[string]any
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("dead-letters %v printed %q", args, sc.Text())
		}
		lines = append(lines, m)
	}
	return lines
}

// waitReplayStored waits for a replay to be stored (or answered, as stored
// gives). A replay is consumed like any message, behind whatever the
// writer holds; on a loaded machine that can take seconds (testenv.WaitFor). When
// it is not stored, the writer's consumer and counters are reported, to
// tell a lost replay from a slow one.
func (s *stack) waitReplayStored(t *testing.T, stored func() bool) {
	t.Helper()
	defer func() {
		if t.Failed() {
			js := testenv.OperatorJS(t, s.nats.Server().ClientURL())
			names := namesIn(s.env)
			if c, err := js.Consumer(context.Background(), names.MappedStream, names.WriterConsumer); err == nil {
				if ci, err := c.Info(context.Background()); err == nil {
					t.Logf("writer consumer: pending %d, ack pending %d, redelivered %d, delivered %+v",
						ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered)
				}
			}
			for k, v := range s.scrape(t, "writer-worker") {
				if strings.Contains(k, "settlements_total") || strings.Contains(k, "answered") || strings.Contains(k, "insert") && strings.Contains(k, "_count") {
					t.Logf("%s %v", k, v)
				}
			}
		}
	}()
	testenv.WaitFor(t, "the replayed dead letter stored", testenv.WaitStall, s.progress, s.dead, stored)
}

// An event the table rejects for good is answered "failed to store" and
// kept as a dead letter while the other events of its batch are stored; a
// retry of its key is answered the same and adds no letter. Once the table
// is fixed, a replay stores it once, a second replay stores nothing, and the
// device's retry is answered stored.
func TestDeadLetterAndReplay(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	s.admin(t, "PUT", "/devices/dev-long", `{"accessToken":"tok-5f0c2b9e71d4-long","inputs":[{"name":"t","entity":"dl","entityInput":"t"}]}`)
	s.admin(t, "PUT", "/devices/ok1", `{"accessToken":"tok-5f0c2b9e71d4-ok1","inputs":[{"name":"t","entity":"dl","entityInput":"t"}]}`)
	// A table that takes serials of at most four bytes: dev-long's values
	// are rejected for good (a data error, not an outage).
	if err := s.ch.Exec(ctx, "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial FixedString(4)"); err != nil {
		t.Fatal(err)
	}
	const stored, failed = "Message processed and data stored successfully", "Message processed but failed to store data"
	expect(t, s.post(t, `{"serial":"ok1","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-ok1")), 200, stored, "")
	keyed := keyHeader("tok-5f0c2b9e71d4-long", "reading-1")
	r := s.post(t, `{"serial":"dev-long","data":{"t":2}}`, keyed)
	if r.Status != 503 || r.Body["message"] != failed {
		t.Fatalf("rejected keyed event answered %d %v", r.Status, r.Body)
	}
	r = s.post(t, `{"serial":"dev-long","data":{"t":3}}`, bearer("tok-5f0c2b9e71d4-long"))
	if r.Status != 503 || r.Body["message"] != failed {
		t.Fatalf("rejected unkeyed event answered %d %v", r.Status, r.Body)
	}
	// Concurrent posts of both devices: ok1's share batches with the
	// rejected ones and are all stored.
	done := make(chan reply, 20)
	for i := range 10 {
		go func() {
			done <- s.post(t, `{"serial":"ok1","data":{"t":`+string(rune('0'+i))+`}}`, bearer("tok-5f0c2b9e71d4-ok1"))
		}()
		go func() { done <- s.post(t, `{"serial":"dev-long","data":{"t":9}}`, bearer("tok-5f0c2b9e71d4-long")) }()
	}
	okStored := 1
	for range 20 {
		if r := <-done; r.Status == 200 {
			okStored++
		} else if r.Body["message"] != failed {
			t.Fatalf("answer %d %v", r.Status, r.Body)
		}
	}
	if okStored != 11 {
		t.Fatalf("%d of ok1's 11 readings stored, want all", okStored)
	}

	// Letters hold the refused events of one envelope each.
	events := func() (keyed, unkeyed int) {
		for _, l := range s.deadLetters(t, "list") {
			if l["reason"] != "permanent_failure" || !strings.Contains(l["subject"].(string), ".mapped.in") {
				t.Fatalf("dead letter %v", l)
			}
			if l["keyed"] == true {
				keyed += int(l["events"].(float64))
			} else {
				unkeyed += int(l["events"].(float64))
			}
		}
		return keyed, unkeyed
	}
	if k, u := events(); k != 1 || u != 11 {
		t.Fatalf("dead letters hold %d keyed and %d unkeyed events, want 1 and 11", k, u)
	}
	// The device retries its key: the same answer, no second letter.
	r = s.post(t, `{"serial":"dev-long","data":{"t":2}}`, keyed)
	if r.Status != 503 || r.Body["message"] != failed {
		t.Fatalf("retry of a dead-lettered key answered %d %v", r.Status, r.Body)
	}
	if k, u := events(); k != 1 || u != 11 {
		t.Fatalf("after the retry the dead letters hold %d keyed and %d unkeyed events, want 1 and 11", k, u)
	}
	if n := s.count(t, "input_values WHERE entity = 'dl'"); n != 11 {
		t.Fatalf("%d values stored while the table rejects dev-long's, want ok1's 11", n)
	}

	// The cause is fixed; the replay stores the keyed event once.
	if err := s.ch.Exec(ctx, "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial String"); err != nil {
		t.Fatal(err)
	}
	rep := s.deadLetters(t, "replay", "-keep")
	if len(rep) != 1 || rep[0]["replayed"] != 1.0 || rep[0]["skippedUnkeyed"].(float64) < 1 {
		t.Fatalf("replay report %v, want 1 replayed and the unkeyed letters skipped", rep)
	}
	longValues := func() uint64 { return s.count(t, "input_values WHERE serial = 'dev-long'") }
	s.waitReplayStored(t, func() bool { return longValues() == 1 })
	// The letter was kept: replaying it again stores nothing more.
	rep = s.deadLetters(t, "replay")
	if len(rep) != 1 || rep[0]["replayed"] != 1.0 {
		t.Fatalf("second replay report %v", rep)
	}
	s.waitReplayStored(t, func() bool { return s.scrape(t, "writer-worker")["writer_worker_keyed_repeats_total"] >= 1 })
	s.waitConsumed(t, namesIn(s.env).MappedStream, namesIn(s.env).WriterConsumer)
	if n := longValues(); n != 1 {
		t.Fatalf("after two replays dev-long has %d values, want 1", n)
	}
	if k, u := events(); k != 0 || u != 11 {
		t.Fatalf("after the replay the dead letters hold %d keyed and %d unkeyed events, want 0 and 11", k, u)
	}
	// The device's retry learns its reading is stored.
	expect(t, s.post(t, `{"serial":"dev-long","data":{"t":2}}`, keyed), 200, stored, "")
	if n := longValues(); n != 1 {
		t.Fatalf("after the device's retry dev-long has %d values, want 1", n)
	}
	m := s.scrape(t, "writer-worker")
	if n := m[`writer_worker_dead_letters_total{reason="permanent_failure"}`]; n < 2 || n > 12 {
		t.Errorf("dead_letters_total = %v, want one per envelope with refused events (2 to 12)", n)
	}
}

// A keyed event whose insert keeps failing for a reason that may pass (its
// table is gone) is retried with backoff until MAX_DELIVER, then kept as a
// dead letter for the delivery limit; the device's retries are answered
// "failed to store" meanwhile. Once the table is back, the replay stores it
// once and the device's retry is answered stored.
func TestDeliveryLimitDeadLetter(t *testing.T) {
	s := startStack(t, "MAX_DELIVER=4", "RETRY_MAX_DELAY=100ms")
	ctx := context.Background()
	s.admin(t, "PUT", "/devices/dev-lim", `{"accessToken":"tok-5f0c2b9e71d4-lim","inputs":[{"name":"t","entity":"lim","entityInput":"t"}]}`)
	if err := s.ch.Exec(ctx, "DROP TABLE "+s.db+".input_values"); err != nil {
		t.Fatal(err)
	}
	const failed = "Message processed but failed to store data"
	keyed := keyHeader("tok-5f0c2b9e71d4-lim", "reading-lim")
	if r := s.post(t, `{"serial":"dev-lim","data":{"t":7}}`, keyed); r.Status != 503 {
		t.Fatalf("keyed event with its table gone answered %d %v", r.Status, r.Body)
	}
	var letters []map[string]any
	eventually(t, 20*time.Second, func() bool {
		letters = s.deadLetters(t, "list")
		return len(letters) > 0
	})
	l := letters[0]
	if len(letters) != 1 || l["reason"] != "delivery_limit" || l["keyed"] != true || l["events"] != 1.0 || l["deliveries"].(float64) < 4 {
		t.Fatalf("dead letters %v, want one keyed letter of one event for the delivery limit after 4 deliveries", letters)
	}
	r := s.post(t, `{"serial":"dev-lim","data":{"t":7}}`, keyed)
	if r.Status != 503 || r.Body["message"] != failed {
		t.Fatalf("retry of a dead-lettered key answered %d %v", r.Status, r.Body)
	}
	if n := s.scrape(t, "writer-worker")[`writer_worker_dead_letters_total{reason="delivery_limit"}`]; n != 1 {
		t.Fatalf("dead_letters_total{delivery_limit} = %v, want 1", n)
	}

	for _, stmt := range schema.Statements(s.db) {
		if err := s.ch.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if rep := s.deadLetters(t, "replay"); len(rep) != 1 || rep[0]["replayed"] != 1.0 {
		t.Fatalf("replay report %v", rep)
	}
	values := func() uint64 { return s.count(t, "input_values WHERE serial = 'dev-lim'") }
	eventually(t, 10*time.Second, func() bool { return values() == 1 })
	expect(t, s.post(t, `{"serial":"dev-lim","data":{"t":7}}`, keyed), 200, "Message processed and data stored successfully", "")
	if n := values(); n != 1 {
		t.Fatalf("dev-lim has %d values after the replay and the retry, want 1", n)
	}
	if left := s.deadLetters(t, "list"); len(left) != 0 {
		t.Fatalf("dead letters left after the replay: %v", left)
	}
}

// Dead letters through the workspace API: an operator key lists them and
// replays the keyed one once its cause is fixed; the event is stored once,
// the letter is gone, and the replay is in the audit trail under the key.
func TestDeadLettersThroughTheWorkspaceAPI(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()
	op := s.createKey(t, "dl-operator", "operator", "")
	s.admin(t, "PUT", "/devices/dev-long", `{"accessToken":"tok-5f0c2b9e71d4-long","inputs":[{"name":"t","entity":"dl","entityInput":"t"}]}`)
	if err := s.ch.Exec(ctx, "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial FixedString(4)"); err != nil {
		t.Fatal(err)
	}
	const stored = "Message processed and data stored successfully"
	keyed := keyHeader("tok-5f0c2b9e71d4-long", "api-reading-1")
	if r := s.post(t, `{"serial":"dev-long","data":{"t":2}}`, keyed); r.Status != 503 {
		t.Fatalf("rejected keyed event answered %d %s", r.Status, r.Raw)
	}
	if r := s.post(t, `{"serial":"dev-long","data":{"t":3}}`, bearer("tok-5f0c2b9e71d4-long")); r.Status != 503 {
		t.Fatalf("rejected unkeyed event answered %d %s", r.Status, r.Raw)
	}
	var letters []any
	eventually(t, 5*time.Second, func() bool {
		letters, _ = s.as(t, op, "GET", "/deadletters", "").Body["letters"].([]any)
		return len(letters) == 2
	})
	for _, l := range letters {
		if m := l.(map[string]any); m["reason"] != "permanent_failure" || m["events"] != 1.0 {
			t.Fatalf("letter %v", m)
		}
	}
	if r := s.as(t, op, "GET", "/deadletters?limit=1", ""); len(r.Body["letters"].([]any)) != 1 || r.Body["next"] == nil {
		t.Fatalf("a page of one: %s", r.Raw)
	}
	if err := s.ch.Exec(ctx, "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial String"); err != nil {
		t.Fatal(err)
	}
	r := s.as(t, op, "POST", "/deadletters/replay", `{}`)
	if r.Status != 200 || r.Body["replayed"] != 1.0 || r.Body["skippedUnkeyed"] != 1.0 {
		t.Fatalf("replay: %d %s", r.Status, r.Raw)
	}
	eventually(t, 10*time.Second, func() bool { return s.count(t, "input_values WHERE serial = 'dev-long'") == 1 })
	if r := s.as(t, op, "GET", "/deadletters", ""); len(r.Body["letters"].([]any)) != 1 {
		t.Fatalf("after the replay: %s", r.Raw)
	}
	expect(t, s.post(t, `{"serial":"dev-long","data":{"t":2}}`, keyed), 200, stored, "")
	a := s.admin(t, "GET", "/audit?action=deadletters.", "")
	recs, _ := a.Body["records"].([]any)
	if len(recs) != 1 {
		t.Fatalf("audit: %s", a.Raw)
	}
	if m := recs[0].(map[string]any); m["actor"] != "dl-operator" || !strings.Contains(string(a.Raw), `"report":{"replayed":1,"skippedUnkeyed":1}`) {
		t.Fatalf("audit record %v", m)
	}
}
