package resolve

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

func entry(t *testing.T, inputs ...registry.Input) *registry.Entry {
	t.Helper()
	c := registry.NewCache()
	c.Put(registry.Device{Serial: "s", ConnectionType: registry.ConnectionAPI, AccessToken: "x", Inputs: inputs}, 1)
	e, _ := c.Lookup("s")
	return e
}

func TestResolve(t *testing.T) {
	dev := entry(t,
		registry.Input{Name: "temp", Entity: "boiler", EntityInput: "temperature"},
		registry.Input{Name: "on", Entity: "boiler", EntityInput: "running"},
		registry.Input{Name: "volt"})
	for _, tc := range []struct {
		name    string
		data    string
		outcome outcome.Code
		values  []string // "entity.input=json"
	}{
		{"numbers and bools", `{"temp":21.5,"on":true,"volt":3}`, outcome.Stored, []string{"boiler.running=true", "boiler.temperature=21.5"}},
		{"unknown keys ignored", `{"temp":1,"nope":2}`, outcome.Stored, []string{"boiler.temperature=1"}},
		{"only unconnected", `{"volt":3,"nope":2}`, outcome.NoConnections, nil},
		{"empty", `{}`, outcome.NoConnections, nil},
		{"null skipped", `{"temp":null,"on":false}`, outcome.Stored, []string{"boiler.running=false"}},
		{"all matched null", `{"temp":null}`, outcome.Stored, nil},
		{"structured", `{"temp":{"a":[1]}}`, outcome.Stored, []string{`boiler.temperature={"a":[1]}`}},
		{"repeated name: the last counts", `{"temp":1,"on":true,"temp":2}`, outcome.Stored, []string{"boiler.running=true", "boiler.temperature=2"}},
		{"repeated name, last null", `{"temp":1,"temp":null}`, outcome.Stored, nil},
		{"escaped name", `{"te\u006dp":3}`, outcome.Stored, []string{"boiler.temperature=3"}},
		{"data null", `null`, outcome.NoConnections, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := event.Event{ID: "id", Serial: "s", ReceivedNs: 7, ReadingNs: 5, TimeNote: "n", Payload: json.RawMessage(`{"serial":"s","data":` + tc.data + `}`)}
			m, err := Event(ev, dev, nil)
			if err != nil {
				t.Fatal(err)
			}
			if m.Outcome != tc.outcome || m.ID != "id" || m.ReceivedNs != 7 || m.ReadingNs != 5 || m.TimeNote != "n" || string(m.Payload) != string(ev.Payload) {
				t.Fatalf("mapped = %+v", m)
			}
			var got []string
			for _, v := range m.Values {
				got = append(got, v.Entity+"."+v.Input+"="+string(v.JSON))
			}
			sort.Strings(got)
			if len(got) != len(tc.values) {
				t.Fatalf("values = %v, want %v", got, tc.values)
			}
			for i := range got {
				if got[i] != tc.values[i] {
					t.Fatalf("values = %v, want %v", got, tc.values)
				}
			}
		})
	}
	if m, err := Event(event.Event{Payload: json.RawMessage(`{"data":{}}`)}, entry(t, registry.Input{Name: "a"}), nil); err != nil || m.Outcome != outcome.NoConnections {
		t.Fatalf("device without connections: %+v %v", m, err)
	}
	for _, bad := range []string{`{"data":5}`, `{"data":{"temp":1}`, `{"data":["temp"]}`} {
		if _, err := Event(event.Event{Payload: json.RawMessage(bad)}, dev, nil); !errors.Is(err, ErrPayload) {
			t.Fatalf("payload %s: err = %v", bad, err)
		}
	}
}

// Values keep the order of data, also past the names a list tracks (a
// device with many inputs, one of them repeated).
func TestResolveOrderAndManyInputs(t *testing.T) {
	var inputs []registry.Input
	var data []string
	for i := range 40 {
		name := fmt.Sprintf("in%02d", i)
		inputs = append(inputs, registry.Input{Name: name, Entity: "e", EntityInput: name})
		data = append(data, fmt.Sprintf("%q:%d", name, i))
	}
	data = append(data, `"in03":"last"`)
	m, err := Event(event.Event{Payload: json.RawMessage(`{"data":{` + strings.Join(data, ",") + `}}`)}, entry(t, inputs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range m.Values {
		got = append(got, v.Input+"="+string(v.JSON))
	}
	var want []string
	for i := range 40 {
		if i != 3 {
			want = append(want, fmt.Sprintf("in%02d=%d", i, i))
		}
	}
	want = append(want, `in03="last"`)
	if !slices.Equal(got, want) {
		t.Fatalf("values\n%v\nwant\n%v", got, want)
	}
}

// Keys that match no connected input are told, once each (the last of a
// repeated name), with their values; the timestamp input is not one.
func TestResolveReportsUnmatchedKeys(t *testing.T) {
	connected := entry(t, registry.Input{Name: "temp", Entity: "boiler", EntityInput: "temperature"}, registry.Input{Name: "volt"})
	c := registry.NewCache()
	c.Put(registry.Device{Serial: "s", ConnectionType: registry.ConnectionAPI, AccessToken: "x", TimestampInput: "at",
		Inputs: []registry.Input{{Name: "at"}}}, 1)
	unconnected, _ := c.Lookup("s")
	for _, tc := range []struct {
		dev  *registry.Entry
		data string
		want string
	}{
		{connected, `{"temp":1,"temperature":2,"volt":3,"x":null,"temperature":4}`, "temperature=4 volt=3 x=null"},
		{connected, `{"temp":1}`, ""},
		{unconnected, `{"temp":1,"at":1700000000000}`, "temp=1"},
		{unconnected, `[1]`, ""},
	} {
		var got []string
		m, err := Event(event.Event{Payload: json.RawMessage(`{"data":` + tc.data + `}`)}, tc.dev, func(k string, v []byte) {
			got = append(got, k+"="+string(v))
		})
		sort.Strings(got)
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%s: unmatched %v (err %v), want %s; outcome %v", tc.data, got, err, tc.want, m.Outcome)
		}
	}
}
