package diag

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"go.uber.org/zap"
)

func collect(t *testing.T, tl *Tally) []Report {
	t.Helper()
	var got []Report
	tl.send = func(_ context.Context, r Report) error {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 2*maxReportBytes {
			t.Fatalf("report of %d bytes", len(b))
		}
		got = append(got, r)
		return nil
	}
	tl.flush(context.Background())
	return got
}

func sums(rs []Report) map[string][2]uint64 {
	m := map[string][2]uint64{}
	for _, r := range rs {
		for _, c := range r.Counts {
			v := m[fmt.Sprintf("%d/%s/%s", r.Minute, c.Serial, c.Kind)]
			v[0] += c.Requests
			v[1] += c.Readings
			m[fmt.Sprintf("%d/%s/%s", r.Minute, c.Serial, c.Kind)] = v
		}
	}
	return m
}

func TestTallyCountsByMinuteSerialAndKind(t *testing.T) {
	tl := NewTally(DefaultLimits, nil, zap.NewNop())
	t0 := time.Unix(1_700_000_020, 0) // 20 s before a minute starts
	for i := range 10 {
		tl.Answer(Answer{Serial: "a", Known: true, Kind: "stored", Requests: 1, Readings: 2, At: t0.Add(time.Duration(i) * 3 * time.Second)})
	}
	for i := range 5 {
		tl.Answer(Answer{Serial: "a", Known: true, Kind: "invalid_token", Requests: 1, Readings: 1, At: t0.Add(time.Duration(i) * time.Second),
			Message: "Invalid access token", Error: fmt.Sprintf("e%d", i), Source: "127.0.0.9"})
	}
	got := collect(t, tl)
	want := map[string][2]uint64{
		"1699999980/a/stored":        {7, 14}, // 0..18 s: seven readings in the first minute
		"1700000040/a/stored":        {3, 6},
		"1699999980/a/invalid_token": {5, 5},
	}
	if s := sums(got); fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", s, want)
	}
	var rej []string
	for _, r := range got {
		for _, x := range r.Rejections {
			if x.Source != "127.0.0.9" || x.Message != "Invalid access token" {
				t.Fatalf("rejection %+v", x)
			}
			rej = append(rej, x.Error)
		}
	}
	sort.Strings(rej)
	if fmt.Sprint(rej) != "[e2 e3 e4]" {
		t.Fatalf("kept rejections %v, want the latest three", rej)
	}
	if again := collect(t, tl); len(again) != 0 {
		t.Fatalf("a second report repeats %v", again)
	}
}

func TestTallyBoundsUnknownSerials(t *testing.T) {
	tl := NewTally(DefaultLimits, nil, zap.NewNop())
	at := time.Unix(1_700_000_040, 0)
	for i := range 10_000 {
		tl.Answer(Answer{Serial: fmt.Sprintf("random-%d", i), Kind: "device_not_found", Requests: 1, Readings: 1, At: at, Message: "Device not found"})
	}
	tl.Answer(Answer{Serial: "honest", Known: true, Kind: "stored", Requests: 1, Readings: 1, At: at})
	// With no serial tracked the minute before, half the places are open.
	tracked := DefaultLimits.Unknown / 2
	if n := len(tl.cur.serials); n != tracked+2 {
		t.Fatalf("%d serials held, want %d tracked + other + honest", n, tracked)
	}
	s := sums(collect(t, tl))
	if v := s["1700000040//device_not_found"]; v[0] != 10_000-uint64(tracked) {
		t.Fatalf("untracked count %v", v)
	}
	if v := s["1700000040/random-0/device_not_found"]; v[0] != 1 {
		t.Fatalf("first tracked %v", v)
	}
	if v := s["1700000040/honest/stored"]; v[0] != 1 {
		t.Fatalf("honest %v", v)
	}
	// The next minute, a serial tracked before keeps its place among a
	// new flood.
	next := at.Add(time.Minute)
	for i := range 1000 {
		tl.Answer(Answer{Serial: fmt.Sprintf("other-%d", i), Kind: "device_not_found", Requests: 1, At: next})
	}
	tl.Answer(Answer{Serial: "random-7", Kind: "device_not_found", Requests: 1, At: next})
	if v := sums(collect(t, tl))["1700000100/random-7/device_not_found"]; v[0] != 1 {
		t.Fatalf("a repeating unknown serial lost its place: %v", v)
	}
}

func TestTallyKeys(t *testing.T) {
	lim := DefaultLimits
	lim.Keys = 2
	tl := NewTally(lim, nil, zap.NewNop())
	at := time.Unix(1_700_000_000, 0)
	tl.Key("a", "temp", []byte(`21.5`), at)
	tl.Key("a", "temp", []byte(`22`), at.Add(time.Second))
	tl.Key("a", "temp", []byte(`20`), at.Add(-time.Second)) // late: not the last value
	tl.Key("a", "hum", []byte(`"x"`), at)
	tl.Key("a", "third", []byte(`1`), at)
	got := collect(t, tl)
	keys := map[string]Key{}
	for _, k := range got[0].Keys {
		keys[k.Key] = k
	}
	if k := keys["temp"]; k.Count != 3 || k.LastValue != "22" || k.LastNs != at.Add(time.Second).UnixNano() {
		t.Fatalf("temp %+v", k)
	}
	if len(keys) != 2 || tl.Dropped() != 1 {
		t.Fatalf("keys %v dropped %d", keys, tl.Dropped())
	}
}

func TestTallyBoundsKeysOverAllSerials(t *testing.T) {
	lim := DefaultLimits
	lim.WindowKeys = 50
	tl := NewTally(lim, nil, zap.NewNop())
	at := time.Unix(1_700_000_000, 0)
	long := string(make([]byte, 10_000)) // clipped before it is kept, as a key and as the map's
	for i := range 40 {
		for j := range 3 {
			tl.Key(fmt.Sprintf("dev-%d", i), fmt.Sprintf("k%d", j)+long, []byte(`1`), at)
		}
	}
	n := 0
	for _, r := range collect(t, tl) {
		for _, k := range r.Keys {
			if want := Clip(k.Key[:2]+long, maxKey); k.Key != want {
				t.Fatalf("key %.20q... of %d bytes kept, want it clipped to %d", k.Key, len(k.Key), len(want))
			}
			n++
		}
	}
	if n != 50 || tl.Dropped() != 70 {
		t.Fatalf("%d keys kept, %d dropped; want 50 and 70", n, tl.Dropped())
	}
	// The next minute's window has its own budget.
	tl.Key("dev-0", "k0", []byte(`1`), at.Add(time.Minute))
	if got := collect(t, tl); len(got) != 1 || len(got[0].Keys) != 1 {
		t.Fatalf("next minute: %+v", got)
	}
}

func TestReportsAreSplit(t *testing.T) {
	tl := NewTally(DefaultLimits, nil, zap.NewNop())
	at := time.Unix(1_700_000_000, 0)
	for i := range 20_000 {
		tl.Answer(Answer{Serial: fmt.Sprintf("device-%06d", i), Known: true, Kind: "stored", Requests: 1, Readings: 1, At: at})
	}
	got := collect(t, tl)
	if len(got) < 2 {
		t.Fatalf("%d reports for 20,000 serials", len(got))
	}
	if s := sums(got); len(s) != 20_000 {
		t.Fatalf("%d counts", len(s))
	}
}

func TestClip(t *testing.T) {
	if got := Clip("ab\xffc", 10); got != "ab\uFFFDc" {
		t.Fatalf("%q", got)
	}
	if got := Clip("abcdef", 3); got != "abc...(6 bytes)" {
		t.Fatalf("%q", got)
	}
}

// Anyone can name a serial: only a request that proved the device's token
// counts as the device seen; a later wrong token is a rejection only.
func TestTallySeenOnlyAuthenticated(t *testing.T) {
	tl := NewTally(DefaultLimits, nil, zap.NewNop())
	t0 := time.Unix(1_700_000_000, 0)
	tl.Answer(Answer{Serial: "a", Known: true, Authenticated: true, Kind: "stored", Requests: 1, Readings: 1, At: t0})
	tl.Answer(Answer{Serial: "a", Known: true, Kind: "invalid_token", Requests: 1, At: t0.Add(time.Second), Message: "Invalid access token"})
	tl.Answer(Answer{Serial: "b", Known: true, Kind: "invalid_token", Requests: 1, At: t0.Add(time.Second), Message: "Invalid access token"})
	var seen []string
	rejected := 0
	for _, r := range collect(t, tl) {
		for _, s := range r.Seen {
			seen = append(seen, fmt.Sprintf("%s %d %s", s.Serial, s.LastNs, s.Kind))
		}
		rejected += len(r.Rejections)
	}
	if want := fmt.Sprintf("[a %d stored]", t0.UnixNano()); fmt.Sprint(seen) != want {
		t.Errorf("seen %v, want %s (wrong tokens are not the device)", seen, want)
	}
	if rejected != 2 {
		t.Errorf("%d rejections kept, want both wrong tokens", rejected)
	}
}
