package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// operatorTool runs `writer-worker args...` with env as the operator NATS
// user and returns its JSON answer.
func operatorTool(t *testing.T, env []string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "writer-worker"), args...)
	cmd.Env = append(append([]string{}, env...), "NATS_USER=operator", "NATS_PASSWORD="+testenv.NATSPassword("operator"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("writer-worker %v: %v\n%s", args, err, errOut.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("writer-worker %v printed %q", args, out.String())
	}
	return m
}

// A backup taken while devices post, restored into a fresh deployment (its
// own NATS server and database): every reading answered stored before the
// backup began is back exactly once, with its raw message; the devices,
// their tokens, a workspace key and the audit trail are back; charts (the
// rollups computed again) count what the readings hold.
func TestBackupRestore(t *testing.T) {
	s := startStack(t)
	const devices = 4
	for d := range devices {
		s.admin(t, "PUT", fmt.Sprintf("/devices/bk-%d", d), fmt.Sprintf(`{"accessToken":"tok-5f0c2b9e71d4-bk-%d","inputs":[{"name":"t","entity":"bk-%d","entityInput":"t"}]}`, d, d))
	}
	secret := s.createKey(t, "restored-viewer", "viewer", "")

	// Devices post unique values until the backup is done.
	type answered struct {
		value int
		at    time.Time
	}
	var mu sync.Mutex
	var stored []answered
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := d*1_000_000 + i
				r := s.post(t, fmt.Sprintf(`{"serial":"bk-%d","data":{"t":%d}}`, d, v), bearer(fmt.Sprintf("tok-5f0c2b9e71d4-bk-%d", d)))
				if r.Status == 200 {
					mu.Lock()
					stored = append(stored, answered{v, time.Now()})
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(time.Second)
	began := time.Now()
	dir := filepath.Join(t.TempDir(), "backup")
	m := operatorTool(t, s.env, "backup", "-dir", dir)
	close(stop)
	wg.Wait()
	var before []int
	for _, a := range stored {
		if a.at.Before(began) {
			before = append(before, a.value)
		}
	}
	t.Logf("backup %v; %d readings answered stored before it began, %d in all", m, len(before), len(stored))
	if len(before) < 20 {
		t.Fatalf("only %d readings stored before the backup", len(before))
	}

	// A fresh deployment: its own NATS server and database, programs
	// started after the restore.
	ns := testenv.NATSControlFor(t, namesIn(nil))
	r := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL())
	r.nats = ns
	operatorTool(t, r.env, "restore", "-dir", dir)
	r.start("writer-worker")
	r.start("mapper-worker")
	r.start("ingest-api")
	r.waitReady()

	counts := map[string]uint64{}
	rows, err := r.ch.Query(t.Context(), "SELECT value_json, count() FROM "+r.db+".input_values GROUP BY value_json")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		var n uint64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		counts[v] = n
	}
	rows.Close()
	for v, n := range counts {
		if n != 1 {
			t.Fatalf("value %s restored %d times", v, n)
		}
	}
	for _, v := range before {
		if counts[fmt.Sprint(v)] != 1 {
			t.Fatalf("reading %d, answered stored before the backup, is not back", v)
		}
	}
	// Their raw messages, once each.
	if n := sumOf(t, r, "SELECT count() FROM (SELECT event_id, count() AS c FROM "+r.db+".device_messages GROUP BY event_id HAVING c > 1)"); n != 0 {
		t.Fatalf("%d raw messages restored twice", n)
	}
	msgs := map[string]bool{}
	prows, err := r.ch.Query(t.Context(), "SELECT payload FROM "+r.db+".device_messages")
	if err != nil {
		t.Fatal(err)
	}
	for prows.Next() {
		var p string
		if err := prows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		if i := strings.Index(p, `"t":`); i >= 0 {
			msgs[strings.TrimRight(p[i+4:], "}")] = true
		}
	}
	prows.Close()
	for _, v := range before {
		if !msgs[fmt.Sprint(v)] {
			t.Fatalf("the raw message of reading %d is not back", v)
		}
	}

	// The registry, the tokens, the key and the audit trail.
	list := r.admin(t, "GET", "/devices", "")
	if got := strings.Count(string(list.Raw), `"serial":"bk-`); got != devices {
		t.Fatalf("restored devices: %s", list.Raw)
	}
	expect(t, r.post(t, `{"serial":"bk-1","data":{"t":-1}}`, bearer("tok-5f0c2b9e71d4-bk-1")), 200, storedMsg, "")
	if a := r.as(t, secret, "GET", "/devices/bk-0", ""); a.Status != 200 {
		t.Fatalf("the restored key answered %d %s", a.Status, a.Raw)
	}
	if a := r.admin(t, "GET", "/audit?action=key.", ""); !strings.Contains(string(a.Raw), "restored-viewer") {
		t.Fatalf("audit trail after the restore: %s", a.Raw)
	}
	// The rollups are computed again from the restored readings (the
	// first rollup of the restored deployment).
	eventually(t, 60*time.Second, func() bool {
		return sumOf(t, r, "SELECT sum(n) FROM (SELECT entity, bucket, argMax(readings, version) AS n FROM "+r.db+".input_hours GROUP BY entity, bucket)") ==
			r.count(t, "input_values")
	})
	var total uint64
	for d := range devices {
		total = 0
		for _, p := range seriesPoints(t, r, fmt.Sprintf("bk-%d", d), began.Add(-time.Hour), time.Now().Add(time.Hour), "1h") {
			total += uint64(p["count"].(float64))
		}
		if want := r.count(t, fmt.Sprintf("input_values WHERE entity = 'bk-%d'", d)); total != want {
			t.Fatalf("chart of bk-%d after the restore counts %d readings, the table %d", d, total, want)
		}
	}
}
