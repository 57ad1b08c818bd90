package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"
)

// bucketWant is what a series bucket must say, computed from what was sent.
type bucketWant struct {
	count         int
	min, max, sum float64
	lastNs        int64
	last          string
}

// seriesPoints asks the workspace API for an entity's input t over
// [from, to] in buckets of step.
func seriesPoints(t *testing.T, s *stack, entity string, from, to time.Time, step string) []map[string]any {
	t.Helper()
	q := url.Values{"from": {apiTime(from)}, "to": {apiTime(to)}, "step": {step}}
	r := s.admin(t, "GET", "/entities/"+entity+"/inputs/t/series?"+q.Encode(), "")
	if r.Status != 200 {
		t.Fatalf("series: %d %s", r.Status, r.Raw)
	}
	pts, _ := r.Body["points"].([]any)
	out := make([]map[string]any, len(pts))
	for i, p := range pts {
		out[i] = p.(map[string]any)
	}
	return out
}

// Readings posted as backlogs (device time over the last three hours) are
// rolled up by writer-worker; charts at minute and hour steps, answered
// from the rollups, say what was sent. Late readings into buckets already
// rolled up are charted as soon as they are answered stored (their minutes
// from the readings until the rollup has run again).
func TestRollups(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dev-R", `{"accessToken":"tok-5f0c2b9e71d4-R","inputs":[{"name":"t","entity":"ru","entityInput":"t"}]}`)
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	end := time.Now().UTC().Add(-2 * time.Minute).Truncate(time.Millisecond)
	start := end.Add(-3 * time.Hour)
	sent := map[int64]float64{} // reading time (ms) -> value
	post := func(n int) {
		var msgs []string
		for range n {
			ts := start.Add(time.Duration(r.Int64N(int64(3 * time.Hour)))).UnixMilli()
			if _, dup := sent[ts]; dup {
				continue
			}
			v := math.Round(r.NormFloat64()*1000) / 10
			sent[ts] = v
			msgs = append(msgs, fmt.Sprintf(`{"ts":%d,"data":{"t":%v}}`, ts, v))
		}
		b := s.postBacklog(t, `{"serial":"dev-R","messages":[`+strings.Join(msgs, ",")+`]}`, bearer("tok-5f0c2b9e71d4-R"))
		if b.Status != 200 {
			t.Fatalf("backlog: %d %s", b.Status, b.Raw)
		}
	}
	check := func(step time.Duration, stepName string) {
		t.Helper()
		want := map[int64]*bucketWant{}
		for ts, v := range sent {
			k := ts / step.Milliseconds() * step.Milliseconds()
			w := want[k]
			if w == nil {
				w = &bucketWant{min: v, max: v, lastNs: -1}
				want[k] = w
			}
			w.count++
			w.min, w.max, w.sum = math.Min(w.min, v), math.Max(w.max, v), w.sum+v
			if ts > w.lastNs {
				w.lastNs, w.last = ts, fmt.Sprint(v)
			}
		}
		got := seriesPoints(t, s, "ru", start, end, stepName)
		if len(got) != len(want) {
			t.Fatalf("step %s: %d buckets, want %d", stepName, len(got), len(want))
		}
		for _, g := range got {
			at, _ := time.Parse(time.RFC3339Nano, g["ts"].(string))
			w := want[at.UnixMilli()]
			last, _ := json.Marshal(g["last"])
			if w == nil || g["count"] != float64(w.count) || g["min"] != w.min || g["max"] != w.max || string(last) != w.last ||
				math.Abs(g["avg"].(float64)-w.sum/float64(w.count)) > 1e-9*math.Max(1, math.Abs(w.sum)) {
				t.Fatalf("step %s: bucket %v, want %+v", stepName, g, w)
			}
		}
	}
	rolled := func(n int) {
		t.Helper()
		// The rollup reads marks 15 s old every minute: the hours hold
		// every reading within 75 s.
		eventually(t, 100*time.Second, func() bool {
			return s.count(t, "input_values WHERE entity = 'ru'") == uint64(n) &&
				sumOf(t, s, "SELECT sum(n) FROM (SELECT bucket, argMax(readings, version) AS n FROM "+s.db+".input_hours WHERE entity = 'ru' GROUP BY bucket)") == uint64(n)
		})
	}
	post(600)
	rolled(len(sent))
	check(time.Minute, "1m")
	check(time.Hour, "1h")
	check(15*time.Minute, "15m")
	// Late readings into the same minutes and hours, charted at once.
	post(300)
	check(time.Minute, "1m")
	check(time.Hour, "1h")
	check(5*time.Minute, "5m")
}

func sumOf(t *testing.T, s *stack, q string) uint64 {
	t.Helper()
	var n uint64
	if err := s.ch.QueryRow(t.Context(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
