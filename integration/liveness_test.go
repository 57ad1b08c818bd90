package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

// silentSerials reads the fleet view's silent list: serial -> lastSeen.
func (s *stack) silentSerials(t *testing.T) map[string]string {
	t.Helper()
	r := s.admin(t, http.MethodGet, "/fleet?range=1h", "")
	var f struct {
		Silent []struct{ Serial, LastSeen string }
	}
	if err := json.Unmarshal(r.Raw, &f); r.Status != http.StatusOK || err != nil {
		t.Fatalf("fleet: %d %s", r.Status, r.Raw)
	}
	out := map[string]string{}
	for _, d := range f.Silent {
		out[d.Serial] = d.LastSeen
	}
	return out
}

// pause spaces the polls of a condition that takes a report interval
// (10 s) to hold; it reports false, the condition not met.
func pause() bool {
	time.Sleep(200 * time.Millisecond)
	return false
}

// Liveness cannot be forged: a stranger naming a dead device's serial
// with a wrong token neither moves its last seen nor takes it off the
// silent list; the wrong tokens show as rejections. The device's own
// request does both.
func TestWrongTokensDoNotKeepADeviceAlive(t *testing.T) {
	s := startStack(t)
	if r := s.admin(t, http.MethodPut, "/devices/live-1", `{"accessToken":"tok-5f0c2b9e71d4-live-1","inputs":[{"name":"temp","entity":"room","entityInput":"temp"}]}`); r.Status != http.StatusOK {
		t.Fatalf("PUT live-1: %d %s", r.Status, r.Raw)
	}
	// Its history: a request a minute for 8 hours, the last 2 hours ago.
	now := time.Now()
	last := now.Add(-2 * time.Hour)
	ctx := context.Background()
	h0 := last.Add(-8*time.Hour).Unix() / 3600 * 3600
	if err := s.ch.Exec(ctx, "INSERT INTO "+s.db+".device_stats_hourly (serial, hour, kind, requests, readings) "+
		"SELECT 'live-1', toInt64(? + number * 3600), 'stored', 60, 60 FROM system.numbers LIMIT 8", h0); err != nil {
		t.Fatal(err)
	}
	if err := s.ch.Exec(ctx, "INSERT INTO "+s.db+".device_seen (serial, last_ns, kind) SELECT 'live-1', toInt64(?), 'stored'", last.UnixNano()); err != nil {
		t.Fatal(err)
	}
	wantSeen := query.FormatNs(last.UnixNano())
	if got := s.silentSerials(t)["live-1"]; got != wantSeen {
		t.Fatalf("live-1 silent since %q, want %s before any stranger", got, wantSeen)
	}

	wrong := map[string]string{"Authorization": "Bearer not-the-token"}
	for range 3 {
		if r := s.post(t, `{"serial":"live-1","data":{"temp":1}}`, wrong); r.Status != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d %s", r.Status, r.Raw)
		}
	}
	// Once the rejections are stored, so would a last seen be. The counts
	// and the list of rejections are written apart: wait for both.
	var d diagView
	eventually(t, 30*time.Second, func() bool {
		d = s.diagnostics(t, "live-1")
		return d.counts() == "invalid_token=3/3" && len(d.Rejections) == 3 || pause()
	})
	if len(d.Rejections) != 3 || d.Rejections[0].Kind != "invalid_token" {
		t.Errorf("rejections %+v, want the three wrong tokens", d.Rejections)
	}
	if d.LastSeen != wantSeen || d.LastKind != "stored" {
		t.Errorf("last seen %q (%s) after wrong tokens, want %s (stored)", d.LastSeen, d.LastKind, wantSeen)
	}
	if got, ok := s.silentSerials(t)["live-1"]; !ok || got != wantSeen {
		t.Errorf("live-1 silent %v since %q after wrong tokens, want silent since %s", ok, got, wantSeen)
	}

	// The device itself.
	sent := time.Now()
	if r := s.post(t, `{"serial":"live-1","data":{"temp":1}}`, map[string]string{"Authorization": "Bearer tok-5f0c2b9e71d4-live-1"}); r.Status != http.StatusOK {
		t.Fatalf("right token: %d %s", r.Status, r.Raw)
	}
	eventually(t, 30*time.Second, func() bool {
		d = s.diagnostics(t, "live-1")
		return d.LastSeen != wantSeen || pause()
	})
	within(t, "live-1 last seen", d.LastSeen, sent, time.Now())
	if _, ok := s.silentSerials(t)["live-1"]; ok {
		t.Errorf("live-1 still silent after its own request")
	}
}
