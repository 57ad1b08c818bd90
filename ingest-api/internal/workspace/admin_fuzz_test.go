package workspace

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// FuzzDeviceRecord: no workspace body panics; an accepted one is a valid,
// normalised record of the path's serial that survives a round trip through
// its own JSON unchanged.
func FuzzDeviceRecord(f *testing.F) {
	for _, seed := range []string{
		`{"connectionType":"API","accessToken":"t","inputs":[{"name":"temp","entity":"b","entityInput":"temperature"},{"name":"volt"}]}`,
		`{"serial":"dev-1","inputs":[]}`,
		`{"serial":"other"}`,
		`{"inputs":[{"name":"a"},{"name":"a"}]}`,
		`{"inputs":[{"name":"a","entityInput":"x"}]}`,
		`{"connectionType":"LoRa"}`,
		`{"unknown":1}`,
		`{}{}`,
		`[]`,
		`{"accessToken":"` + strings.Repeat("x", 600) + `"}`,
		`{"inputs":[{"name":"a\u0000b","entity":"e"}]}`,
	} {
		f.Add("dev-1", []byte(seed))
	}
	f.Fuzz(func(t *testing.T, serial string, body []byte) {
		d, err := decodeDevice(strings.NewReader(string(body)), serial)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("refusal without a reason")
			}
			return
		}
		if d.Serial != serial || len(d.Tokens) != 0 || (d.ConnectionType != registry.ConnectionAPI && d.ConnectionType != registry.ConnectionMQTT) {
			t.Fatalf("accepted an incomplete record: %+v", d)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeDevice(strings.NewReader(string(b)), serial)
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("accepted record does not round-trip: %+v -> %+v, %v", d, again, err)
		}
	})
}

// FuzzSeriesParams: no query string panics; an accepted one has a limit in
// bounds and a range that does not run backwards.
func FuzzSeriesParams(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", ""},
		{"10", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00.123+01:00"},
		{"0", "", ""},
		{"10001", "", ""},
		{"-1", "x", "y"},
		{"9999999999999999999999", "", ""},
		{"5", "2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, limit, from, to string) {
		req, err := seriesRequest(limit, from, to, now)
		if err != nil {
			return
		}
		if req.Limit < 1 || req.Limit > query.MaxLimit || req.FromMs > req.ToMs {
			t.Fatalf("accepted %q %q %q as %+v", limit, from, to, req)
		}
		if from == "" && to == "" && (req.ToMs != now.UnixMilli() || req.FromMs != now.Add(-24*time.Hour).UnixMilli()) {
			t.Fatalf("default range %+v", req)
		}
	})
}
