package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// diagView is the part of GET /devices/{serial}/diagnostics the tests read.
type diagView struct {
	LastSeen string `json:"lastSeen"`
	LastKind string `json:"lastKind"`
	Counts   []struct {
		Kind               string
		Requests, Readings uint64
	} `json:"counts"`
	Rejections []struct {
		At, Kind, Message, Error, Source string
	} `json:"rejections"`
	Keys []struct {
		Key       string `json:"key"`
		Count     uint64 `json:"count"`
		LastAt    string `json:"lastAt"`
		LastValue string `json:"lastValue"`
	} `json:"unmatchedKeys"`
	ReadingTime struct {
		Messages, Timed                 uint64
		LateP50Ms, LateP99Ms, LateMaxMs int64
		AtReceive                       []struct {
			Note  string
			Count uint64
		}
	} `json:"readingTime"`
}

func (s *stack) diagnostics(t *testing.T, serial string) diagView {
	t.Helper()
	r := s.admin(t, http.MethodGet, "/devices/"+serial+"/diagnostics?range=1h", "")
	if r.Status != http.StatusOK {
		t.Fatalf("diagnostics of %s: %d %s", serial, r.Status, r.Raw)
	}
	var d diagView
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// counts renders a view's counts as "kind=requests/readings" in kind order.
func (d diagView) counts() string {
	var parts []string
	for _, c := range d.Counts {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", c.Kind, c.Requests, c.Readings))
	}
	return strings.Join(parts, " ")
}

// Every number the diagnostics show is checked against what the test sent
// and was answered: stored readings, rejections that never reached storage
// (wrong token, MQTT-type device, rate limited, not accepted), a backlog's
// messages by their own outcomes, keys that match no connected input, how
// late the readings arrived, and the fleet view's unknown serials and most
// rejected devices.
func TestDeviceDiagnostics(t *testing.T) {
	start := time.Now()
	s := startStack(t, "DEVICE_RATE=1", "DEVICE_BURST=12")
	for serial, body := range map[string]string{
		"diag-1": `{"accessToken":"tok-5f0c2b9e71d4-d1","timestampInput":"at","inputs":[{"name":"temp","entity":"room","entityInput":"temp"}]}`,
		"diag-m": `{"connectionType":"MQTT","accessToken":"tok-5f0c2b9e71d4-dm","inputs":[{"name":"temp","entity":"room","entityInput":"temp"}]}`,
		"diag-b": `{"accessToken":"tok-5f0c2b9e71d4-db","inputs":[{"name":"temp","entity":"room","entityInput":"temp"}]}`,
	} {
		if r := s.admin(t, http.MethodPut, "/devices/"+serial, body); r.Status != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", serial, r.Status, r.Raw)
		}
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	want := func(r reply, status int) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
		}
	}
	// diag-1: five readings whose time (data.at) is k seconds old, each
	// with a key the mapping does not know.
	for k := 1; k <= 5; k++ {
		at := time.Now().Add(-time.Duration(k) * time.Second).UnixMilli()
		want(s.post(t, fmt.Sprintf(`{"serial":"diag-1","data":{"at":%d,"temp":%d,"humidity":%d}}`, at, 20+k, 40+k), bearer("tok-5f0c2b9e71d4-d1")), 200)
	}
	// One whose time lies a day ahead: stored at its receive time.
	want(s.post(t, fmt.Sprintf(`{"serial":"diag-1","data":{"at":%d,"temp":1}}`, time.Now().Add(24*time.Hour).UnixMilli()), bearer("tok-5f0c2b9e71d4-d1")), 200)
	// A body over MAX_BODY_BYTES (1 MiB), never read whole: counted under
	// the serial its first bytes name.
	want(s.post(t, `{"serial":"diag-1","data":{"temp":"`+strings.Repeat("x", 1<<20)+`"}}`, bearer("tok-5f0c2b9e71d4-d1")), 413)
	for range 3 {
		want(s.post(t, `{"serial":"diag-1","data":{"temp":1}}`, bearer("wrong-token")), 401)
	}
	for range 2 {
		want(s.post(t, `{"serial":"diag-1","data":[1]}`, bearer("tok-5f0c2b9e71d4-d1")), 400)
	}
	// A backlog: two messages stored (under a renamed key as well), one
	// not an object.
	want(s.postBacklog(t, `{"serial":"diag-1","messages":[{"data":{"temp":2,"temperature":7}},{"data":{"temp":3,"temperature":8}},5]}`, bearer("tok-5f0c2b9e71d4-d1")), 200)
	// An MQTT-type device, with its right token.
	for range 2 {
		want(s.post(t, `{"serial":"diag-m","data":{"temp":1}}`, bearer("tok-5f0c2b9e71d4-dm")), 401)
	}
	// Two bodies that name no serial.
	for range 2 {
		want(s.post(t, `not json`, bearer("tok-5f0c2b9e71d4-d1")), 400)
	}
	// An unknown serial that keeps knocking.
	for range 4 {
		want(s.post(t, `{"serial":"ghost-7","data":{"temp":1}}`, bearer("tok-5f0c2b9e71d4-x")), 404)
	}
	// diag-b: its burst of 12 readings, then rate limited.
	stored, limited := 0, 0
	for range 16 {
		switch r := s.post(t, `{"serial":"diag-b","data":{"temp":1}}`, bearer("tok-5f0c2b9e71d4-db")); r.Status {
		case 200:
			stored++
		case 429:
			limited++
		default:
			t.Fatalf("diag-b: %d %s", r.Status, r.Raw)
		}
	}
	if limited == 0 {
		t.Fatalf("diag-b was never rate limited (%d stored)", stored)
	}

	wantCounts := "invalid_data=2/2 invalid_format=0/1 invalid_token=3/3 partly_stored=1/0 payload_too_large=1/0 stored=6/8"
	var d diagView
	// Reports go every 10 s: a stall of 45 s without a change is none.
	testenv.WaitFor(t, "diag-1 counts "+wantCounts+" and two keys", 45*time.Second, func() string { return fmt.Sprintf("counts %q, keys %+v", d.counts(), d.Keys) }, s.dead, func() bool {
		time.Sleep(time.Second)
		d = s.diagnostics(t, "diag-1")
		return d.counts() == wantCounts && len(d.Keys) == 2
	})
	if d.LastKind != "partly_stored" {
		t.Errorf("last seen %q kind %q, want the backlog", d.LastSeen, d.LastKind)
	}
	sent := time.Now()
	within(t, "last seen", d.LastSeen, start, sent)
	// The latest three rejections of the 10 s report they fell in; the
	// newest is the second invalid data.
	if len(d.Rejections) == 0 || len(d.Rejections) > 5 {
		t.Fatalf("rejections %+v", d.Rejections)
	}
	if r := d.Rejections[0]; r.Kind != "invalid_data" || r.Message != "Invalid data format" || r.Error != "Message data must be a valid object" || r.Source != "127.0.0.1" {
		t.Errorf("newest rejection %+v", r)
	}
	within(t, "newest rejection", d.Rejections[0].At, start, sent)
	keys := map[string]string{}
	for _, k := range d.Keys {
		keys[k.Key] = fmt.Sprintf("%d:%s", k.Count, k.LastValue)
		within(t, "key "+k.Key+" last sent", k.LastAt, start, sent)
	}
	if keys["humidity"] != "5:45" || keys["temperature"] != "2:8" {
		t.Errorf("unmatched keys %v, want humidity 5 times (last 45) and temperature twice (last 8)", keys)
	}
	rt := d.ReadingTime
	if rt.Messages != 8 || rt.Timed != 5 {
		t.Errorf("reading time over %d messages, %d timed; want 8 and 5", rt.Messages, rt.Timed)
	}
	// Lateness is k seconds plus the time to the receive: exact quantiles
	// of 1..5 s are the 3rd and 5th.
	for name, got := range map[string][2]int64{"p50": {rt.LateP50Ms, 3000}, "p99": {rt.LateP99Ms, 5000}, "max": {rt.LateMaxMs, 5000}} {
		if got[0] < got[1] || got[0] > got[1]+2000 {
			t.Errorf("lateness %s %d ms, want %d ms and a little", name, got[0], got[1])
		}
	}
	if len(rt.AtReceive) != 1 || rt.AtReceive[0].Count != 1 || !strings.Contains(rt.AtReceive[0].Note, "ahead of the receive time") {
		t.Errorf("stored at receive time: %+v", rt.AtReceive)
	}

	wantB := fmt.Sprintf("rate_limited=%d/%d stored=%d/%d", limited, limited, stored, stored)
	var m, b string
	testenv.WaitFor(t, "diag-m mqtt_device=2/2 and diag-b "+wantB, 45*time.Second, func() string { return fmt.Sprintf("diag-m %q, diag-b %q", m, b) }, s.dead, func() bool {
		time.Sleep(time.Second)
		m, b = s.diagnostics(t, "diag-m").counts(), s.diagnostics(t, "diag-b").counts()
		return m == "mqtt_device=2/2" && b == wantB
	})

	r := s.admin(t, http.MethodGet, "/fleet?range=1h", "")
	var f struct {
		MostRejected, Unknown []struct {
			Serial              string
			Requests            uint64
			FirstSeen, LastSeen string `json:",omitempty"`
		}
		UnknownUntracked uint64
		Unnamed          []struct {
			Kind     string
			Requests uint64
		}
	}
	if err := json.Unmarshal(r.Raw, &f); r.Status != http.StatusOK || err != nil {
		t.Fatalf("fleet: %d %s", r.Status, r.Raw)
	}
	if len(f.Unknown) != 1 || f.Unknown[0].Serial != "ghost-7" || f.Unknown[0].Requests != 4 || f.UnknownUntracked != 0 {
		t.Fatalf("unknown serials %v (+%d untracked), want ghost-7 four times", f.Unknown, f.UnknownUntracked)
	}
	if fmt.Sprint(f.Unnamed) != "[{invalid_format 2}]" {
		t.Errorf("requests that named no serial %v, want two not JSON", f.Unnamed)
	}
	// First seen is counted to the minute.
	within(t, "ghost-7 first seen", f.Unknown[0].FirstSeen, start.Truncate(time.Minute), sent)
	within(t, "ghost-7 last seen", f.Unknown[0].LastSeen, start, sent)
	// Most rejected first; how many of diag-b's 16 were rate limited
	// depends on the machine's pace (its bucket refills meanwhile).
	var most []string
	for i, m := range f.MostRejected {
		most = append(most, fmt.Sprintf("%s %d", m.Serial, m.Requests))
		within(t, m.Serial+" last seen", m.LastSeen, start, sent)
		if i > 0 && m.Requests > f.MostRejected[i-1].Requests {
			t.Errorf("most rejected out of order: %v", most)
		}
	}
	got := slices.Clone(most)
	slices.Sort(got)
	if want := []string{"diag-1 6", fmt.Sprintf("diag-b %d", limited), "diag-m 2"}; !slices.Equal(got, want) {
		t.Errorf("most rejected %s, want %s", strings.Join(most, ", "), strings.Join(want, ", "))
	}
	if r := s.admin(t, http.MethodGet, "/devices/nope/diagnostics", ""); r.Status != http.StatusNotFound {
		t.Errorf("diagnostics of an unknown device: %d", r.Status)
	}
	if r := s.admin(t, http.MethodGet, "/fleet?range=2y", ""); r.Status != http.StatusBadRequest {
		t.Errorf("fleet over a bad range: %d", r.Status)
	}
}

// within checks that text, a time the API answered, lies in [from, to].
func within(t *testing.T, what, text string, from, to time.Time) {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, text)
	if err != nil || at.Before(from) || at.After(to) {
		t.Errorf("%s %q, want a time from %s to %s", what, text, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	}
}
