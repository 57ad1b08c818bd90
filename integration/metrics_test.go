package integration

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// scrape returns the samples a program's /metrics serves, by series (name
// and labels as printed).
func (s *stack) scrape(t *testing.T, program string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.ops[program] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s /metrics: %d", program, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: bad sample %q", program, line)
		}
		out[line[:i]] = v
	}
	return out
}

// testMetrics runs after the pipeline's subtests: the counters reflect what
// they did.
func testMetrics(t *testing.T, s *stack) {
	ingest := s.scrape(t, "ingest-api")
	mapper := s.scrape(t, "mapper-worker")
	writer := s.scrape(t, "writer-worker")
	stored := s.count(t, "input_values")
	for _, c := range []struct {
		what string
		got  float64
		ok   func(float64) bool
	}{
		// 300 concurrent posts alone were stored.
		{"ingest stored requests", ingest[`ingest_api_requests_total{outcome="stored",status="200"}`], func(v float64) bool { return v >= 300 }},
		{"ingest invalid tokens", ingest[`ingest_api_requests_total{outcome="invalid_token",status="401"}`], func(v float64) bool { return v >= 1 }},
		{"ingest event latency count", ingest[`ingest_api_request_duration_seconds_count{route="/api/v1/deviceapi/event"}`], func(v float64) bool { return v >= 300 }},
		{"ingest outcome wait count", ingest[`ingest_api_outcome_wait_seconds_count`], func(v float64) bool { return v >= 300 }},
		{"ingest registry devices", ingest[`ingest_api_registry_devices`], func(v float64) bool { return v >= 3 }},
		{"ingest publish errors", ingest[`ingest_api_publish_errors_total`], func(v float64) bool { return v == 0 }},
		{"mapper stored events", mapper[`mapper_worker_events_total{outcome="stored"}`], func(v float64) bool { return v >= 300 }},
		{"mapper no connections", mapper[`mapper_worker_events_total{outcome="no_connections"}`], func(v float64) bool { return v >= 1 }},
		{"mapper consumer readable", mapper[`mapper_worker_consumer_info_up{consumer="mapper",stream="DEVICES_EVENTS"}`], func(v float64) bool { return v == 1 }},
		{"writer rows = rows in ClickHouse", writer[`writer_worker_rows_stored_total{table="input_values"}`], func(v float64) bool { return v == float64(stored) }},
		{"writer insert timings", writer[`writer_worker_insert_duration_seconds_count{table="input_values"}`], func(v float64) bool { return v >= 1 }},
		{"writer consumer lag", writer[`writer_worker_consumer_pending_messages{consumer="writer",stream="DEVICES_MAPPED"}`], func(v float64) bool { return v == 0 }},
		{"writer process metrics", writer[`process_resident_memory_bytes`], func(v float64) bool { return v > 0 }},
	} {
		if !c.ok(c.got) {
			t.Errorf("%s: %v", c.what, c.got)
		}
	}
	// No token in any series.
	for _, p := range []string{"ingest-api", "mapper-worker", "writer-worker"} {
		for series := range s.scrape(t, p) {
			for _, tok := range []string{tokA, tokMQTT, tokNoMap, adminToken} {
				if strings.Contains(series, tok) {
					t.Errorf("%s exports a token in %s", p, series)
				}
			}
		}
	}
}

// testMonitoringNames checks that every metric the dashboard and the alert
// rules under deploy/monitoring use is one the programs export.
func testMonitoringNames(t *testing.T, s *stack) {
	// One stored reading, so that the series of a request exist.
	expect(t, s.post(t, `{"serial":"dev-A","data":{"temp":22}}`, bearer(tokA)), 200, storedMsg, "")
	exported := map[string]bool{}
	for _, p := range []string{"ingest-api", "mapper-worker", "writer-worker"} {
		for series := range s.scrape(t, p) {
			name, _, _ := strings.Cut(series, "{")
			exported[name] = true
		}
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile(`\b(?:ingest_api|mapper_worker|writer_worker|process)_[a-z0-9_]+`)
	checked := 0
	for _, f := range []string{"deploy/monitoring/alerts.yml", "deploy/monitoring/grafana/dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range ref.FindAllString(string(b), -1) {
			checked++
			if !exported[name] {
				t.Errorf("%s uses %s, which no program exports", f, name)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric references found", checked)
	}
}
