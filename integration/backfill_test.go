package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// backfillView is a backfill as the workspace API shows it.
type backfillView struct {
	ID, State, Error                             string
	CancelRequested                              bool
	Progress                                     float64
	Messages, Readings, Skipped, Unreadable      int64
	From, To, Created, Started, Finished, Serial string
}

func (s *stack) startBackfill(t *testing.T, serial, body string, status int) backfillView {
	t.Helper()
	r := s.admin(t, http.MethodPost, "/devices/"+serial+"/backfills", body)
	if r.Status != status {
		t.Fatalf("start backfill: %d %s, want %d", r.Status, r.Raw, status)
	}
	var v backfillView
	_ = json.Unmarshal(r.Raw, &v)
	return v
}

// waitBackfill polls the device's backfills until id is finished, as
// long as it progresses (testenv.WaitFor: its counts are part of the progress).
func (s *stack) waitBackfill(t *testing.T, serial, id string) backfillView {
	t.Helper()
	var done backfillView
	var last []byte
	testenv.WaitFor(t, "backfill "+id+" finished", testenv.WaitStall, func() string { return s.progress() + ", backfills " + string(last) }, s.dead, func() bool {
		time.Sleep(200 * time.Millisecond) // a page takes longer
		r := s.admin(t, http.MethodGet, "/devices/"+serial+"/backfills", "")
		var list struct{ Backfills []backfillView }
		if r.Status != http.StatusOK || json.Unmarshal(r.Raw, &list) != nil {
			t.Fatalf("list backfills: %d %s", r.Status, r.Raw)
		}
		last = r.Raw
		for _, v := range list.Backfills {
			if v.ID == id && v.State != "queued" && v.State != "running" {
				done = v
				return true
			}
		}
		return false
	})
	return done
}

// A firmware update renames temp to temperature mid-stream: the renamed
// readings are answered "No connections configured" and only their raw
// messages are kept. The mapping is fixed and a backfill over the whole
// stream stores each renamed reading once, in its reading time, and skips
// what was stored live before and after; a second backfill stores nothing;
// a cancelled one stops.
func TestBackfill(t *testing.T) {
	s := startStack(t)
	const serial = "bf-1"
	device := func(inputs string) string {
		return `{"accessToken":"tok-5f0c2b9e71d4-bf","timestampInput":"datetime","inputs":[` + inputs + `]}`
	}
	if r := s.admin(t, http.MethodPut, "/devices/"+serial, device(`{"name":"temp","entity":"boiler","entityInput":"temperature"}`)); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Raw)
	}
	bearer := map[string]string{"Authorization": "Bearer tok-5f0c2b9e71d4-bf"}
	start := time.Now().Add(-time.Second)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var readingMs []int64
	send := func(i int, key string, value any, status int) {
		t.Helper()
		at := base.Add(time.Duration(i) * time.Minute)
		v, _ := json.Marshal(value)
		r := s.post(t, fmt.Sprintf(`{"serial":%q,"data":{"datetime":%q,%q:%s}}`, serial, at.Format(time.RFC3339Nano), key, v), bearer)
		if r.Status != status {
			t.Fatalf("reading %d: %d %s, want %d", i, r.Status, r.Raw, status)
		}
		if value != nil {
			readingMs = append(readingMs, at.UnixMilli())
		}
	}
	for i := range 5 {
		send(i, "temp", 20+i, http.StatusOK)
	}
	for i := 5; i < 11; i++ {
		send(i, "temperature", 20+i, http.StatusUnprocessableEntity)
	}
	send(11, "temperature", nil, http.StatusUnprocessableEntity) // a null: nothing to store
	if r := s.admin(t, http.MethodPut, "/devices/"+serial, device(`{"name":"temp","entity":"boiler","entityInput":"temperature"},{"name":"temperature","entity":"boiler","entityInput":"temperature"}`)); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Raw)
	}
	for i := 12; i < 15; i++ {
		send(i, "temperature", 20+i, http.StatusOK)
	}
	stored := func() (rows, distinct uint64) {
		q := "SELECT count(), uniqExact(event_id, device_input) FROM " + s.db + ".input_values WHERE entity = 'boiler' AND input = 'temperature' AND serial = ?"
		if err := s.ch.QueryRow(t.Context(), q, serial).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}
	if rows, _ := stored(); rows != 8 {
		t.Fatalf("%d values stored live, want 8", rows)
	}

	body := fmt.Sprintf(`{"from":%q}`, start.Format(time.RFC3339Nano))
	first := s.startBackfill(t, serial, body, http.StatusAccepted)
	if first.State != "queued" || first.Serial != serial {
		t.Fatalf("a new backfill: %+v", first)
	}
	s.startBackfill(t, serial, body, http.StatusConflict) // one at a time per device
	done := s.waitBackfill(t, serial, first.ID)
	if done.State != "done" || done.Messages != 15 || done.Readings != 6 || done.Skipped != 8 || done.Unreadable != 0 || done.Progress != 1 {
		t.Fatalf("first backfill: %+v, want done with 15 messages, 6 readings, 8 skipped", done)
	}
	if rows, distinct := stored(); rows != 14 || distinct != 14 {
		t.Fatalf("after the backfill %d values (%d distinct), want 14", rows, distinct)
	}
	// Every reading is stored in its reading time (the device's datetime).
	var got []int64
	rows, err := s.ch.Query(t.Context(), "SELECT ts_ms FROM "+s.db+".input_values WHERE serial = ? ORDER BY ts_ms", serial)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			t.Fatal(err)
		}
		got = append(got, ms)
	}
	rows.Close()
	slices.Sort(readingMs)
	if !slices.Equal(got, readingMs) {
		t.Fatalf("reading times stored %v, want %v", got, readingMs)
	}

	again := s.waitBackfill(t, serial, s.startBackfill(t, serial, body, http.StatusAccepted).ID)
	if again.State != "done" || again.Messages != 15 || again.Readings != 0 || again.Skipped != 14 {
		t.Fatalf("second backfill: %+v, want 0 readings stored and 14 skipped", again)
	}
	if rows, distinct := stored(); rows != 14 || distinct != 14 {
		t.Fatalf("after the second backfill %d values (%d distinct), want 14", rows, distinct)
	}

	third := s.startBackfill(t, serial, body, http.StatusAccepted)
	if r := s.admin(t, http.MethodDelete, "/devices/"+serial+"/backfills/"+third.ID, ""); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Raw)
	}
	if v := s.waitBackfill(t, serial, third.ID); v.State != "cancelled" || v.Finished == "" {
		t.Fatalf("cancelled backfill: %+v", v)
	}
	if r := s.admin(t, http.MethodDelete, "/devices/"+serial+"/backfills/nope", ""); r.Status != http.StatusNotFound {
		t.Fatalf("cancel of an unknown backfill: %d %s", r.Status, r.Raw)
	}
	for _, bad := range []string{`{}`, `{"from":"yesterday"}`, fmt.Sprintf(`{"from":%q}`, time.Now().Add(time.Hour).Format(time.RFC3339))} {
		s.startBackfill(t, serial, bad, http.StatusBadRequest)
	}
	s.startBackfill(t, "no-such-device", body, http.StatusNotFound)

	// Deleting the device cancels its backfill.
	fourth := s.startBackfill(t, serial, body, http.StatusAccepted)
	if r := s.admin(t, http.MethodDelete, "/devices/"+serial, ""); r.Status != http.StatusNoContent {
		t.Fatalf("delete device: %d %s", r.Status, r.Raw)
	}
	if v := s.waitBackfill(t, serial, fourth.ID); v.State != "cancelled" {
		t.Fatalf("the deleted device's backfill: %+v", v)
	}
	if rows, distinct := stored(); rows != 14 || distinct != 14 {
		t.Fatalf("at the end %d values (%d distinct), want 14", rows, distinct)
	}
	r := s.admin(t, http.MethodGet, "/audit?action=backfill.", "")
	var trail struct {
		Records []struct{ Action, Target, Actor string }
	}
	if err := json.Unmarshal(r.Raw, &trail); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, rec := range trail.Records {
		if rec.Target != serial {
			t.Errorf("audit record %+v", rec)
		}
		actions = append(actions, rec.Action)
	}
	want := []string{"backfill.cancelled", "backfill.started", "backfill.cancelled", "backfill.started", "backfill.started", "backfill.started"}
	if !slices.Equal(actions, want) {
		t.Fatalf("audit trail %v, want %v", actions, want)
	}
}

// A writer-worker copy stopped mid-backfill (a rolling restart) gives the
// lease up; the other copy resumes the job from its last recorded page and
// every reading ends up stored once.
func TestBackfillMovesToAnotherCopy(t *testing.T) {
	s := startStack(t)
	s.start("writer-worker.2")
	const serial, n = "bf-move", 300_000
	if r := s.admin(t, http.MethodPut, "/devices/"+serial, `{"inputs":[{"name":"temp","entity":"boiler-m","entityInput":"temp"}]}`); r.Status != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.Status, r.Raw)
	}
	// The raw log of n messages (one a second, two hours ago), written as
	// the writer keeps it, answered before the key was connected.
	start := time.Now().Add(-2 * time.Hour).Add(-n * time.Second).Truncate(time.Second)
	if err := s.ch.Exec(t.Context(), "INSERT INTO "+s.db+".device_messages (serial, ts_ns, event_id, payload, outcome, reading_ns, time_note, token) "+
		"SELECT ?, toInt64(? + number * 1000000000), toString(generateUUIDv4()), concat('{\"serial\":\"bf-move\",\"data\":{\"temp\":', toString(number), '}}'), "+
		"'No connections configured', toInt64(? + number * 1000000000), '', 'token-1' FROM system.numbers LIMIT ?", serial, start.UnixNano(), start.UnixNano(), n); err != nil {
		t.Fatal(err)
	}
	bf := s.startBackfill(t, serial, fmt.Sprintf(`{"from":%q}`, start.Format(time.RFC3339)), http.StatusAccepted)
	// Stop the copy that runs it once it is under way.
	running := ""
	var seen []byte
	testenv.WaitFor(t, "the backfill under way", 60*time.Second, func() string { return s.progress() + ", backfills " + string(seen) }, s.dead, func() bool {
		r := s.admin(t, http.MethodGet, "/devices/"+serial+"/backfills", "")
		var list struct{ Backfills []backfillView }
		_ = json.Unmarshal(r.Raw, &list)
		seen = r.Raw
		if len(list.Backfills) == 1 && list.Backfills[0].State == "running" && list.Backfills[0].Messages > 0 {
			for _, name := range []string{"writer-worker", "writer-worker.2"} {
				if b, _ := os.ReadFile(filepath.Join(s.logDir, name+".log")); strings.Contains(string(b), "backfill running") {
					running = name
				}
			}
		}
		return running != ""
	})
	s.kill(t, running, os.Interrupt)
	other := map[string]string{"writer-worker": "writer-worker.2", "writer-worker.2": "writer-worker"}[running]
	done := s.waitBackfill(t, serial, bf.ID)
	if b, _ := os.ReadFile(filepath.Join(s.logDir, other+".log")); !strings.Contains(string(b), "backfill running") {
		t.Fatalf("%s did not resume the backfill", other)
	}
	var rows, distinct uint64
	if err := s.ch.QueryRow(t.Context(), "SELECT count(), uniqExact(event_id) FROM "+s.db+".input_values WHERE serial = ?", serial).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if done.State != "done" || done.Messages != n || done.Readings+done.Skipped != n || rows != n || distinct != n {
		t.Fatalf("backfill %+v; %d values stored (%d distinct), want done with %d messages and every reading stored once", done, rows, distinct, n)
	}
	t.Logf("stopped %s mid-backfill; the other copy finished it: %d readings stored by the two, %d found already stored", running, done.Readings, done.Skipped)

	// A running backfill cancelled stops after its page: a second pass over
	// the range (everything already stored) is cancelled once under way.
	again := s.startBackfill(t, serial, fmt.Sprintf(`{"from":%q}`, start.Format(time.RFC3339)), http.StatusAccepted)
	testenv.WaitFor(t, "the second backfill under way", 60*time.Second, func() string { return s.progress() + ", backfills " + string(seen) }, s.dead, func() bool {
		r := s.admin(t, http.MethodGet, "/devices/"+serial+"/backfills", "")
		var list struct{ Backfills []backfillView }
		_ = json.Unmarshal(r.Raw, &list)
		seen = r.Raw
		v := list.Backfills[0]
		return v.ID == again.ID && v.State == "running" && v.Messages > 0
	})
	r := s.admin(t, http.MethodDelete, "/devices/"+serial+"/backfills/"+again.ID, "")
	var asked backfillView
	if r.Status != http.StatusOK || json.Unmarshal(r.Raw, &asked) != nil || !asked.CancelRequested || asked.State != "running" {
		t.Fatalf("cancel a running backfill: %d %s", r.Status, r.Raw)
	}
	stopped := s.waitBackfill(t, serial, again.ID)
	if stopped.State != "cancelled" || stopped.Messages >= n || stopped.Readings != 0 || stopped.Skipped != stopped.Messages {
		t.Fatalf("the cancelled backfill: %+v, want cancelled part way, having stored nothing", stopped)
	}
	if err := s.ch.QueryRow(t.Context(), "SELECT count() FROM "+s.db+".input_values WHERE serial = ?", serial).Scan(&rows); err != nil || rows != n {
		t.Fatalf("%d values after the cancelled pass (%v), want %d", rows, err, n)
	}
}
