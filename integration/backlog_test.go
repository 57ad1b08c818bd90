package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func (s *stack) postBacklog(t testing.TB, body string, header map[string]string) reply {
	t.Helper()
	return s.do(t, http.MethodPost, "/api/v1/deviceapi/events", []byte(body), header)
}

// results renders a backlog answer's results as "message|error" lines.
func results(r reply) []string {
	var out []string
	rs, _ := r.Body["results"].([]any)
	for _, x := range rs {
		m := x.(map[string]any)
		e, _ := m["error"].(string)
		out = append(out, fmt.Sprintf("%v|%v|%s", m["success"], m["message"], e))
	}
	return out
}

const (
	storedText = "Message processed and data stored successfully"
	okResult   = "true|" + storedText + "|"
)

// The backlog endpoint, row by row of the contract: the request-level
// answers are the single endpoint's without results; otherwise one result
// per message, the stored ones stored once, in reading time.
func TestBacklogContract(t *testing.T) {
	s := startStack(t, "MAX_BATCH_MESSAGES=5")
	s.admin(t, "PUT", "/devices/dev-B", `{"accessToken":"tok-5f0c2b9e71d4-B","timestampInput":"datetime","inputs":[{"name":"t","entity":"bk","entityInput":"t"}]}`)
	s.admin(t, "PUT", "/devices/dev-M", `{"accessToken":"tok-5f0c2b9e71d4-M","connectionType":"MQTT","inputs":[]}`)
	dev := bearer("tok-5f0c2b9e71d4-B")
	for _, c := range []struct {
		name, body string
		header     map[string]string
		status     int
		message    string
		errText    string
	}{
		{"not an object", `[{"data":{}}]`, dev, 400, "Invalid message format", "Message must be a valid JSON object"},
		{"no serial", `{"messages":[{"data":{}}]}`, dev, 400, "Missing serial number", "Device serial number is required"},
		{"no token", `{"serial":"dev-B","messages":[{"data":{}}]}`, nil, 401, "Missing access token", "Device access token is required (either in data or as Bearer token)"},
		{"no messages", `{"serial":"dev-B","accessToken":"tok-5f0c2b9e71d4-B"}`, nil, 400, "Invalid data format", "Messages must be a non-empty array"},
		{"messages not an array", `{"serial":"dev-B","messages":{"data":{}}}`, dev, 400, "Invalid data format", "Messages must be a non-empty array"},
		{"empty", `{"serial":"dev-B","messages":[]}`, dev, 400, "Invalid data format", "Messages must be a non-empty array"},
		{"too many", `{"serial":"dev-B","messages":[{},{},{},{},{},{}]}`, dev, 413, "Payload too large", "Too many messages in one request (at most 5)"},
		{"unknown device", `{"serial":"nope","messages":[{"data":{}}]}`, dev, 404, "Device not found", "Device with serial nope not found"},
		{"wrong token", `{"serial":"dev-B","messages":[{"data":{}}]}`, bearer("bad"), 401, "Invalid access token", "Invalid access token for device with serial dev-B"},
		{"MQTT device", `{"serial":"dev-M","accessToken":"tok-5f0c2b9e71d4-M","messages":[{"data":{}}]}`, nil, 401, "Invalid access token", "Invalid access token for device with serial dev-M"},
	} {
		r := s.postBacklog(t, c.body, c.header)
		if r.Status != c.status || r.Body["message"] != c.message || r.Body["error"] != c.errText || r.Body["success"] != false || r.Body["results"] != nil {
			t.Errorf("%s: %d %s, want %d %q %q without results", c.name, r.Status, r.Raw, c.status, c.message, c.errText)
		}
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	at := func(i int) time.Time { return now.Add(-time.Hour + time.Duration(i)*time.Minute) }
	// Every message stored: 200 and success, in reading time.
	r := s.postBacklog(t, fmt.Sprintf(`{"serial":"dev-B","accessToken":"tok-5f0c2b9e71d4-B","messages":[
		{"ts":%d,"data":{"t":1}},{"data":{"datetime":%q,"t":2}},{"ts":%q,"data":{"t":3,"datetime":null}}]}`,
		at(0).UnixMilli(), fieldTime(at(1)), at(2).Format(time.RFC3339Nano)), nil)
	if r.Status != 200 || r.Body["success"] != true || r.Body["message"] != storedText || strings.Join(results(r), ",") != strings.Repeat(okResult+",", 2)+okResult {
		t.Fatalf("all stored: %d %s", r.Status, r.Raw)
	}
	// Some rejected one by one, the rest stored.
	r = s.postBacklog(t, `{"serial":"dev-B","messages":[{"data":{"t":4}},"x",{"data":5},{"data":{"other":1}},{"data":{"t":null}}]}`, dev)
	want := []string{okResult, "false|Invalid message format|Message must be a valid JSON object", "false|Invalid data format|Message data must be a valid object",
		"false|No connections configured|No connections found for this device", okResult}
	if r.Status != 200 || r.Body["success"] != false || r.Body["message"] != "Some messages were not stored" ||
		r.Body["error"] != "3 of 5 messages were not stored" || strings.Join(results(r), ",") != strings.Join(want, ",") {
		t.Fatalf("partly stored: %d %s", r.Status, r.Raw)
	}
	q := url.Values{"from": {apiTime(now.Add(-2 * time.Hour))}, "to": {apiTime(time.Now().Add(time.Minute))}}
	var got []string
	for _, p := range s.admin(t, "GET", "/entities/bk/inputs/t/series?"+q.Encode(), "").Body["points"].([]any) {
		pt := p.(map[string]any)
		got = append(got, fmt.Sprintf("%v@%v", pt["value"], pt["ts"]))
	}
	if len(got) != 4 || got[0] != "1@"+apiTime(at(0)) || got[1] != "2@"+apiTime(at(1)) || got[2] != "3@"+apiTime(at(2)) || !strings.HasPrefix(got[3], "4@") {
		t.Fatalf("series %v", got)
	}
	// Each well-formed message is its own entry in the Messages view, with
	// its own outcome and no token.
	eventually(t, 10*time.Second, func() bool {
		msgs, _ := s.admin(t, "GET", "/devices/dev-B/messages?limit=50", "").Body["messages"].([]any)
		return len(msgs) == 6
	})
	outcomes := map[string]int{}
	for _, m := range s.admin(t, "GET", "/devices/dev-B/messages?limit=50", "").Body["messages"].([]any) {
		mm := m.(map[string]any)
		outcomes[mm["outcome"].(string)]++
		if p := mm["payload"].(map[string]any); p["serial"] != "dev-B" || p["accessToken"] != nil {
			t.Fatalf("message payload %v", p)
		}
	}
	if outcomes[storedText] != 5 || outcomes["No connections configured"] != 1 {
		t.Fatalf("Messages view outcomes %v, want 5 stored and 1 no connections", outcomes)
	}
}

// A storage failure stores nothing of a backlog and is answered 503; a
// keyed backlog's retry with the same key gets the first attempt's results
// and stores nothing more.
func TestBacklogKeyedAndFailed(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dev-K", `{"accessToken":"tok-5f0c2b9e71d4-K","inputs":[{"name":"t","entity":"bkk","entityInput":"t"}]}`)
	s.admin(t, "PUT", "/devices/dev-F", `{"accessToken":"tok-5f0c2b9e71d4-F","inputs":[{"name":"t","entity":"bkf","entityInput":"t"}]}`)
	// The table refuses everything for good: nothing of the backlog is
	// stored, every message is answered failed, 503 + Retry-After.
	if err := s.ch.Exec(t.Context(), "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial FixedString(4)"); err != nil {
		t.Fatal(err)
	}
	r := s.postBacklog(t, `{"serial":"dev-F","messages":[{"data":{"t":1}},{"data":{"t":2}}]}`, bearer("tok-5f0c2b9e71d4-F"))
	failed := "false|Message processed but failed to store data|"
	rs := results(r)
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || r.Body["message"] != "Message processed but failed to store data" ||
		len(rs) != 2 || !strings.HasPrefix(rs[0], failed) || !strings.HasPrefix(rs[1], failed) {
		t.Fatalf("failed backlog: %d %s", r.Status, r.Raw)
	}
	if n := s.count(t, "input_values WHERE entity = 'bkf'"); n != 0 {
		t.Fatalf("%d values of a failed backlog stored, want 0", n)
	}
	if err := s.ch.Exec(t.Context(), "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial String"); err != nil {
		t.Fatal(err)
	}

	body := `{"serial":"dev-K","messages":[{"data":{"t":1}},{"data":{"u":2}},{"data":{"t":3}}]}`
	key := keyHeader("tok-5f0c2b9e71d4-K", "backlog-1")
	first := s.postBacklog(t, body, key)
	want := okResult + ",false|No connections configured|No connections found for this device," + okResult
	if first.Status != 200 || strings.Join(results(first), ",") != want {
		t.Fatalf("first attempt: %d %s", first.Status, first.Raw)
	}
	for range 2 {
		again := s.postBacklog(t, body, key)
		if again.Status != 200 || strings.Join(results(again), ",") != want || again.Body["error"] != "1 of 3 messages were not stored" {
			t.Fatalf("retry: %d %s", again.Status, again.Raw)
		}
	}
	if n := s.count(t, "input_values WHERE entity = 'bkk'"); n != 2 {
		t.Fatalf("%d values after a backlog and two retries, want 2", n)
	}
}

// As the field clients will send it: a device whose timestampInput is
// datetime posts a live reading, then a two-hour backlog of 720 readings
// (10 s apart, lower-case times, nulls) in 8 keyed requests. Every reading
// is stored once at its device time, latest stays the live reading, series
// and SQL show the backlog in time order, the Messages view shows each one.
func TestFieldClientBacklog(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dev-FC", `{"accessToken":"tok-5f0c2b9e71d4-FC","timestampInput":"datetime","inputs":[
		{"name":"temp","entity":"field","entityInput":"temp"},{"name":"hum","entity":"field","entityInput":"hum"}]}`)
	now := time.Now().UTC().Truncate(time.Millisecond)
	live := now.Add(-5 * time.Second)
	expect(t, s.post(t, fmt.Sprintf(`{"serial":"dev-FC","accessToken":"tok-5f0c2b9e71d4-FC","data":{"datetime":%q,"temp":99.5,"hum":null}}`, fieldTime(live)),
		map[string]string{"Authorization": "Bearer user-jwt-not-a-device-token"}), 200, storedText, "")
	start := now.Add(-2 * time.Hour)
	for b := range 8 {
		var msgs []string
		for i := b * 90; i < (b+1)*90; i++ {
			msgs = append(msgs, fmt.Sprintf(`{"data":{"datetime":%q,"temp":%d,"hum":null}}`, fieldTime(start.Add(time.Duration(i)*10*time.Second)), i))
		}
		body := `{"serial":"dev-FC","accessToken":"tok-5f0c2b9e71d4-FC","messages":[` + strings.Join(msgs, ",") + `]}`
		r := s.postBacklog(t, body, map[string]string{"Authorization": "Bearer user-jwt-not-a-device-token", "Idempotency-Key": fmt.Sprint("outage-", b)})
		// A Content-Length, not a chunked answer: simple HTTP stacks read it.
		if r.Status != 200 || r.Body["success"] != true || len(results(r)) != 90 || r.Header.Get("Content-Length") != fmt.Sprint(len(r.Raw)) {
			t.Fatalf("backlog request %d: %d %.300s", b, r.Status, r.Raw)
		}
	}
	if n := s.count(t, "input_values WHERE serial = 'dev-FC'"); n != 721 {
		t.Fatalf("%d values stored, want 721 (no hum, no datetime)", n)
	}
	latest := s.admin(t, "GET", "/entities/field/inputs/temp/latest", "")
	if latest.Body["ts"] != apiTime(live) || fmt.Sprint(latest.Body["value"]) != "99.5" {
		t.Fatalf("latest %s, want the live reading", latest.Raw)
	}
	q := url.Values{"from": {apiTime(start)}, "to": {apiTime(now)}, "limit": {"1000"}}
	pts := s.admin(t, "GET", "/entities/field/inputs/temp/series?"+q.Encode(), "").Body["points"].([]any)
	if len(pts) != 721 {
		t.Fatalf("series has %d points, want 721", len(pts))
	}
	for i, p := range pts[:720] {
		pt := p.(map[string]any)
		if pt["ts"] != apiTime(start.Add(time.Duration(i)*10*time.Second)) || fmt.Sprint(pt["value"]) != fmt.Sprint(i) {
			t.Fatalf("series point %d: %v", i, pt)
		}
	}
	var prev int64
	rows, err := s.ch.Query(t.Context(), "SELECT ts_ns FROM "+s.db+".input_values WHERE entity = 'field' ORDER BY ts_ns")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var ts int64
		if err := rows.Scan(&ts); err != nil {
			t.Fatal(err)
		}
		if ts <= prev {
			t.Fatalf("two readings at %d", ts)
		}
		prev, n = ts, n+1
	}
	rows.Close()
	if n != 721 {
		t.Fatalf("SQL saw %d readings", n)
	}
	eventually(t, 10*time.Second, func() bool {
		msgs, _ := s.admin(t, "GET", "/devices/dev-FC/messages?limit=1000", "").Body["messages"].([]any)
		return len(msgs) == 721
	})
}
