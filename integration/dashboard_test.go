package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

// The reads behind the console and dashboards: the device listing with
// last-message times, the entities with their latest values, and series
// aggregated into buckets in ClickHouse.
func TestDashboardReads(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dash-A", `{"accessToken":"tok-5f0c2b9e71d4-A","inputs":[
		{"name":"t","entity":"boiler","entityInput":"temp"},{"name":"on","entity":"boiler","entityInput":"running"}]}`)
	s.admin(t, "PUT", "/devices/dash-B", `{"accessToken":"tok-5f0c2b9e71d4-B","inputs":[
		{"name":"t2","entity":"boiler","entityInput":"temp"},{"name":"mode","entity":"pump","entityInput":"mode"}]}`)
	s.admin(t, "PUT", "/devices/dash-C", `{"accessToken":"tok-5f0c2b9e71d4-C","inputs":[{"name":"x"}]}`)

	// One minute of boiler readings 10 s apart (1..6), and three in the next
	// minute (10, 20, 30), sent as backlogs in reading time.
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	var msgs []string
	for i := range 6 {
		msgs = append(msgs, fmt.Sprintf(`{"ts":%d,"data":{"t":%d,"on":%t}}`, base.Add(time.Duration(i)*10*time.Second).UnixMilli(), i+1, i%2 == 0))
	}
	for i := range 3 {
		msgs = append(msgs, fmt.Sprintf(`{"ts":%d,"data":{"t":%d}}`, base.Add(time.Minute+time.Duration(i)*10*time.Second).UnixMilli(), 10*(i+1)))
	}
	expect(t, s.postBacklog(t, `{"serial":"dash-A","messages":[`+strings.Join(msgs, ",")+`]}`, bearer("tok-5f0c2b9e71d4-A")), 200, "Message processed and data stored successfully", "")
	const script = `<img src=x onerror=alert(1)>`
	expect(t, s.postBacklog(t, fmt.Sprintf(`{"serial":"dash-B","messages":[{"ts":%d,"data":{"mode":"eco"}},{"ts":%d,"data":{"mode":%q}}]}`,
		base.UnixMilli(), base.Add(time.Second).UnixMilli(), script), bearer("tok-5f0c2b9e71d4-B")), 200, "Message processed and data stored successfully", "")

	// Devices: pages in serial order, a prefix, last-message times (once
	// the raw log, which lags by its batch interval, has them), no token.
	var page reply
	eventually(t, 10*time.Second, func() bool {
		page = s.admin(t, "GET", "/devices?limit=2", "")
		devs, _ := page.Body["devices"].([]any)
		return len(devs) == 2 && field(devs[1], "lastMessageAt") != nil
	})
	if page.Status != 200 || strings.Contains(string(page.Raw), "tok-5f0c2b9e71d4-") {
		t.Fatalf("device page: %d %s", page.Status, page.Raw)
	}
	devs := page.Body["devices"].([]any)
	if len(devs) != 2 || field(devs[0], "serial") != "dash-A" || field(devs[1], "serial") != "dash-B" || page.Body["nextCursor"] == nil {
		t.Fatalf("first page %s", page.Raw)
	}
	if at, _ := field(devs[0], "lastMessageAt").(string); at == "" || at < apiTime(time.Now().Add(-time.Minute)) {
		t.Fatalf("dash-A lastMessageAt %v: want its receive time", field(devs[0], "lastMessageAt"))
	}
	if in := field(devs[0], "inputs").([]any); len(in) != 2 || field(in[0], "entity") != "boiler" {
		t.Fatalf("dash-A inputs %v", in)
	}
	next := s.admin(t, "GET", "/devices?limit=2&cursor="+url.QueryEscape(page.Body["nextCursor"].(string)), "")
	devs = next.Body["devices"].([]any)
	if len(devs) != 1 || field(devs[0], "serial") != "dash-C" || field(devs[0], "lastMessageAt") != nil || next.Body["nextCursor"] != nil {
		t.Fatalf("second page %s", next.Raw)
	}
	if p := s.admin(t, "GET", "/devices?prefix=dash-B", ""); len(p.Body["devices"].([]any)) != 1 {
		t.Fatalf("prefix: %s", p.Raw)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "cursor=%25%25"} {
		if r := s.admin(t, "GET", "/devices?"+bad, ""); r.Status != 400 || r.Body["success"] != false {
			t.Errorf("devices?%s: %d %s", bad, r.Status, r.Raw)
		}
	}

	// Entities: each input with the device inputs feeding it and its latest
	// value.
	ents := s.admin(t, "GET", "/entities", "")
	var got struct {
		Entities []struct {
			Entity string
			Inputs []struct {
				Input  string
				Feeds  []struct{ Serial, DeviceInput string }
				Latest *struct {
					Value  json.RawMessage
					TS     string
					Serial string
				}
			}
		}
	}
	if err := json.Unmarshal(ents.Raw, &got); err != nil || len(got.Entities) != 2 {
		t.Fatalf("entities: %s (%v)", ents.Raw, err)
	}
	boiler, pump := got.Entities[0], got.Entities[1]
	if boiler.Entity != "boiler" || len(boiler.Inputs) != 2 || boiler.Inputs[0].Input != "running" || boiler.Inputs[1].Input != "temp" {
		t.Fatalf("boiler %+v", boiler)
	}
	temp := boiler.Inputs[1]
	if len(temp.Feeds) != 2 || temp.Feeds[0].Serial != "dash-A" || temp.Feeds[1].DeviceInput != "t2" {
		t.Fatalf("temp feeds %+v", temp.Feeds)
	}
	if temp.Latest == nil || string(temp.Latest.Value) != "30" || temp.Latest.TS != apiTime(base.Add(time.Minute+20*time.Second)) || temp.Latest.Serial != "dash-A" {
		t.Fatalf("temp latest %+v", temp.Latest)
	}
	var mode string
	if pump.Entity != "pump" || pump.Inputs[0].Latest == nil || json.Unmarshal(pump.Inputs[0].Latest.Value, &mode) != nil || mode != script {
		t.Fatalf("pump %s", ents.Raw)
	}

	// Aggregated series: two one-minute buckets of numbers.
	q := url.Values{"from": {apiTime(base.Add(-time.Minute))}, "to": {apiTime(base.Add(3 * time.Minute))}, "step": {"1m"}}
	agg := s.admin(t, "GET", "/entities/boiler/inputs/temp/series?"+q.Encode(), "")
	want := fmt.Sprintf(`{"step":"1m","points":[{"ts":%q,"count":6,"min":1,"max":6,"avg":3.5,"last":6},{"ts":%q,"count":3,"min":10,"max":30,"avg":20,"last":30}]}`,
		apiTime(base), apiTime(base.Add(time.Minute)))
	if agg.Status != 200 || strings.TrimSpace(string(agg.Raw)) != want {
		t.Fatalf("buckets: %d\n%s\nwant\n%s", agg.Status, agg.Raw, want)
	}
	// Booleans: min/max/avg of true = 1; strings: count and last only.
	q.Set("step", "5m")
	if r := s.admin(t, "GET", "/entities/boiler/inputs/running/series?"+q.Encode(), ""); !strings.Contains(string(r.Raw), `"count":6,"min":0,"max":1,"avg":0.5,"last":false}`) {
		t.Fatalf("bool buckets %s", r.Raw)
	}
	if r := s.admin(t, "GET", "/entities/pump/inputs/mode/series?"+q.Encode(), ""); !strings.Contains(string(r.Raw), `"count":2,"last":"\u003cimg src=x onerror=alert(1)\u003e"}`) {
		t.Fatalf("string buckets %s", r.Raw)
	}
	// A range without readings answers empty lists, not null.
	empty := url.Values{"from": {apiTime(base.Add(-2 * time.Hour))}, "to": {apiTime(base.Add(-time.Hour))}}
	if r := s.admin(t, "GET", "/entities/boiler/inputs/temp/series?"+empty.Encode(), ""); strings.TrimSpace(string(r.Raw)) != `{"points":[]}` {
		t.Fatalf("empty raw series: %s", r.Raw)
	}
	empty.Set("step", "1m")
	if r := s.admin(t, "GET", "/entities/boiler/inputs/temp/series?"+empty.Encode(), ""); strings.TrimSpace(string(r.Raw)) != `{"step":"1m","points":[]}` {
		t.Fatalf("empty buckets: %s", r.Raw)
	}
	// points=N: the service picks the step, at most N buckets.
	q.Del("step")
	q.Set("points", "3")
	r := s.admin(t, "GET", "/entities/boiler/inputs/temp/series?"+q.Encode(), "")
	wantStep := query.FormatStep(query.StepFor(base.Add(-time.Minute).UnixMilli(), base.Add(3*time.Minute).UnixMilli(), 3))
	if r.Body["step"] != wantStep || len(r.Body["points"].([]any)) > 3 || len(r.Body["points"].([]any)) < 1 {
		t.Fatalf("points=3: %s", r.Raw)
	}
	for bad, msg := range map[string]string{
		"step=1m&points=3": "give step or points, not both",
		"step=1ms":         "step too small for the range (at most 10000 buckets)",
		"points=0":         "points must be 1 to 10000",
		"step=fast":        "step must be a duration such as 30s, 5m, 1h or 1d",
	} {
		r := s.admin(t, "GET", "/entities/boiler/inputs/temp/series?from="+url.QueryEscape(apiTime(base))+"&to="+url.QueryEscape(apiTime(base.Add(time.Hour)))+"&"+bad, "")
		if r.Status != 400 || r.Body["error"] != msg {
			t.Errorf("series?%s: %d %s, want 400 %q", bad, r.Status, r.Raw, msg)
		}
	}
}

func field(v any, name string) any { return v.(map[string]any)[name] }
