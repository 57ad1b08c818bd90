package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// fieldTime renders t as one of the field clients does: ISO 8601 with
// milliseconds, lower-case t and z.
func fieldTime(t time.Time) string {
	return strings.ToLower(t.UTC().Format("2006-01-02T15:04:05.000Z"))
}

func apiTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// Readings in device time, as the field clients send them: the reading
// time in data.datetime (lower-case form), nulls, a key per reading, and a
// backlog sent oldest first after a newer live reading. Every reading is
// stored once at its device time; latest stays the newest; series, SQL and
// the Messages view show the backlog in time order.
func TestReadingTime(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dev-T", `{"accessToken":"tok-5f0c2b9e71d4-T","timestampInput":"datetime","inputs":[
		{"name":"temp","entity":"plant","entityInput":"temp"},{"name":"hum","entity":"plant","entityInput":"hum"}]}`)
	if got := s.admin(t, "GET", "/devices/dev-T", ""); got.Body["timestampInput"] != "datetime" {
		t.Fatalf("device record %s", got.Raw)
	}
	const stored = "Message processed and data stored successfully"
	now := time.Now().UTC().Truncate(time.Millisecond)
	live := now.Add(-10 * time.Second)
	expect(t, s.post(t, fmt.Sprintf(`{"serial":"dev-T","data":{"datetime":%q,"temp":21.5,"hum":null}}`, fieldTime(live)),
		keyHeader("tok-5f0c2b9e71d4-T", "live-1")), 200, stored, "")

	// Two hours ago, ten readings 10 s apart, oldest first.
	start := now.Add(-2 * time.Hour)
	for i := range 10 {
		at := start.Add(time.Duration(i) * 10 * time.Second)
		body := fmt.Sprintf(`{"serial":"dev-T","data":{"datetime":%q,"temp":%d,"hum":null}}`, fieldTime(at), i+1)
		expect(t, s.post(t, body, keyHeader("tok-5f0c2b9e71d4-T", fmt.Sprint("backlog-", i))), 200, stored, "")
	}

	latest := s.admin(t, "GET", "/entities/plant/inputs/temp/latest", "")
	if latest.Body["ts"] != apiTime(live) || fmt.Sprint(latest.Body["value"]) != "21.5" {
		t.Fatalf("latest after the backlog: %s, want the live reading at %s", latest.Raw, apiTime(live))
	}
	q := url.Values{"from": {apiTime(start.Add(-time.Minute))}, "to": {apiTime(now)}}
	series := s.admin(t, "GET", "/entities/plant/inputs/temp/series?"+q.Encode(), "")
	pts, _ := series.Body["points"].([]any)
	if len(pts) != 11 {
		t.Fatalf("series: %s, want 11 points", series.Raw)
	}
	for i, p := range pts {
		pt := p.(map[string]any)
		wantTS, wantV := apiTime(start.Add(time.Duration(i)*10*time.Second)), fmt.Sprint(i+1)
		if i == 10 {
			wantTS, wantV = apiTime(live), "21.5"
		}
		if pt["ts"] != wantTS || fmt.Sprint(pt["value"]) != wantV {
			t.Fatalf("series point %d: %v, want %s at %s", i, pt, wantV, wantTS)
		}
		if i < 10 && pt["receivedAt"].(string) <= apiTime(live) {
			t.Fatalf("backlog point %d received %v, before the live reading", i, pt["receivedAt"])
		}
	}
	// SQL in reading time, as the README's analyst section shows it; the
	// receive time is there for every value.
	rows, err := s.ch.Query(context.Background(), fmt.Sprintf(
		"SELECT value_json, ts_ms, received_ns >= ts_ns + 7000000000000 FROM %s.input_values WHERE entity = 'plant' AND input = 'temp' AND ts_ns >= ? ORDER BY ts_ns", s.db),
		start.Add(-time.Minute).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	var sqlValues []string
	var late int
	for rows.Next() {
		var v string
		var ms int64
		var isLate uint8
		if err := rows.Scan(&v, &ms, &isLate); err != nil {
			t.Fatal(err)
		}
		sqlValues = append(sqlValues, v)
		late += int(isLate)
	}
	rows.Close()
	if got := strings.Join(sqlValues, ","); got != "1,2,3,4,5,6,7,8,9,10,21.5" || late != 10 {
		t.Fatalf("SQL in reading time: %s (%d received 2 h late), want 1..10 then 21.5, 10 late", got, late)
	}
	// The timestamp key is no value (it is no connected input); nulls are skipped.
	if n := s.count(t, "input_values WHERE serial = 'dev-T' AND input IN ('datetime', 'hum')"); n != 0 {
		t.Fatalf("%d values of datetime or hum stored, want 0", n)
	}
	// The Messages view: receive order, newest first, each with its reading time.
	eventually(t, 10*time.Second, func() bool {
		m := s.admin(t, "GET", "/devices/dev-T/messages?limit=20", "")
		msgs, _ := m.Body["messages"].([]any)
		return len(msgs) == 11
	})
	msgs := s.admin(t, "GET", "/devices/dev-T/messages?limit=20", "").Body["messages"].([]any)
	for i, m := range msgs {
		mm := m.(map[string]any)
		want := apiTime(start.Add(time.Duration(9-i) * 10 * time.Second))
		if i == 10 {
			want = apiTime(live)
		}
		if mm["readingTime"] != want || mm["timeNote"] != nil {
			t.Fatalf("message %d: %v, want reading time %s and no note", i, mm, want)
		}
	}
}

// ts, then the timestamp input, then the receive time; a time that is out of
// bounds or no time is replaced by the receive time, and the Messages view
// says why; readings with one reading time keep their arrival order.
func TestReadingTimeChoiceAndBounds(t *testing.T) {
	s := startStack(t)
	s.admin(t, "PUT", "/devices/dev-P", `{"accessToken":"tok-5f0c2b9e71d4-P","timestampInput":"datetime","inputs":[
		{"name":"v","entity":"prec","entityInput":"v"},{"name":"datetime","entity":"prec","entityInput":"clock"}]}`)
	const stored = "Message processed and data stored successfully"
	now := time.Now().UTC().Truncate(time.Millisecond)
	tsTime, inputTime := now.Add(-time.Hour), now.Add(-30*time.Minute)
	post := func(body string) {
		t.Helper()
		expect(t, s.post(t, body, bearer("tok-5f0c2b9e71d4-P")), 200, stored, "")
	}
	post(fmt.Sprintf(`{"serial":"dev-P","ts":%d,"data":{"datetime":%q,"v":1}}`, tsTime.UnixMilli(), fieldTime(inputTime)))
	post(fmt.Sprintf(`{"serial":"dev-P","data":{"datetime":%q,"v":2}}`, fieldTime(inputTime)))
	post(fmt.Sprintf(`{"serial":"dev-P","ts":%q,"data":{"v":3}}`, inputTime.Format(time.RFC3339Nano)))
	post(`{"serial":"dev-P","ts":"2020-01-01T00:00:00Z","data":{"v":4}}`)
	post(fmt.Sprintf(`{"serial":"dev-P","data":{"datetime":%q,"v":5}}`, now.Add(time.Hour).Format(time.RFC3339)))
	post(`{"serial":"dev-P","data":{"datetime":"yesterday","v":6}}`)
	post(`{"serial":"dev-P","ts":null,"data":{"v":7}}`)

	points := map[string]string{}
	var order []string
	q := url.Values{"from": {apiTime(now.Add(-2 * time.Hour))}, "to": {apiTime(time.Now().Add(time.Minute))}}
	for _, p := range s.admin(t, "GET", "/entities/prec/inputs/v/series?"+q.Encode(), "").Body["points"].([]any) {
		pt := p.(map[string]any)
		points[fmt.Sprint(pt["value"])] = pt["ts"].(string)
		order = append(order, fmt.Sprint(pt["value"]))
	}
	if points["1"] != apiTime(tsTime) || points["2"] != apiTime(inputTime) || points["3"] != apiTime(inputTime) {
		t.Fatalf("reading times %v: want 1 at ts %s, 2 and 3 at %s", points, apiTime(tsTime), apiTime(inputTime))
	}
	// 2 and 3 share a reading time: arrival order. 4 to 7 were stored at
	// their receive times, after the others.
	if got := strings.Join(order, ","); got != "1,2,3,4,5,6,7" {
		t.Fatalf("series order %s", got)
	}
	for _, v := range []string{"4", "5", "6", "7"} {
		if points[v] < apiTime(now) {
			t.Fatalf("reading %s stored at %s, want its receive time (after %s)", v, points[v], apiTime(now))
		}
	}
	// The timestamp key is also a connected input here: it is a value too.
	if n := s.count(t, "input_values WHERE entity = 'prec' AND input = 'clock'"); n != 4 {
		t.Fatalf("%d clock values, want the 4 messages that sent datetime", n)
	}
	notes := map[string]string{}
	eventually(t, 10*time.Second, func() bool {
		msgs, _ := s.admin(t, "GET", "/devices/dev-P/messages?limit=20", "").Body["messages"].([]any)
		for _, m := range msgs {
			mm := m.(map[string]any)
			data := mm["payload"].(map[string]any)["data"].(map[string]any)
			note, _ := mm["timeNote"].(string)
			notes[fmt.Sprint(data["v"])] = note
		}
		return len(msgs) == 7
	})
	want := map[string]string{
		"1": "", "2": "", "3": "", "7": "",
		"4": "ts is older than MAX_READING_AGE (2160h0m0s): stored at receive time",
		"5": "data.datetime is more than 5m0s ahead of the receive time: stored at receive time",
		"6": "data.datetime is not a time: stored at receive time",
	}
	for v, w := range want {
		if notes[v] != w {
			t.Errorf("message with v=%s: note %q, want %q", v, notes[v], w)
		}
	}
}
