package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	addr, db := testenv.ClickHouseDB(t)
	// As deployed: reads as the readonly user deploy/clickhouse/server.sh makes.
	s, err := Open(Config{URL: "clickhouse://ingest_writer@" + addr + "/" + db, ReadUser: "ingest_reader"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("schema is not idempotent: %v", err)
	}
	return s
}

func TestValuesRoundTripInArrivalOrder(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	// Three readings within one millisecond, arrival order 1, 2, 3, plus
	// every kind of JSON value.
	rows := []ValueRow{
		{Entity: "boiler", Input: "temp", TsNs: base + 3, Serial: "d1", DeviceInput: "t", EventID: "e3", JSON: json.RawMessage(`{"a":[1,2]}`)},
		{Entity: "boiler", Input: "temp", TsNs: base + 1, Serial: "d1", DeviceInput: "t", EventID: "e1", JSON: json.RawMessage(`21.5`)},
		{Entity: "boiler", Input: "temp", TsNs: base + 2, Serial: "d1", DeviceInput: "t", EventID: "e2", JSON: json.RawMessage(`true`)},
		{Entity: "boiler", Input: "mode", TsNs: base + 4, Serial: "d1", DeviceInput: "m", EventID: "e4", JSON: json.RawMessage(`"eco"`)},
	}
	if err := s.InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	pts, next, err := s.Series(ctx, "boiler", "temp", base/1e6-1000, base/1e6+1000, 100, query.MaxBytes)
	if err != nil || next != 0 {
		t.Fatal(next, err)
	}
	want := []string{`21.5`, `true`, `{"a":[1,2]}`}
	if len(pts) != len(want) {
		t.Fatalf("series has %d points, want %d: %+v", len(pts), len(want), pts)
	}
	for i, p := range pts {
		if string(p.Value) != want[i] {
			t.Errorf("point %d = %s, want %s", i, p.Value, want[i])
		}
		if p.TS != "2026-03-01T12:00:00.000Z" {
			t.Errorf("point %d ts = %s", i, p.TS)
		}
	}
	latest, err := s.Latest(ctx, "boiler", "mode", query.MaxBytes)
	if err != nil || len(latest) != 1 || string(latest[0].Value) != `"eco"` || latest[0].Serial != "d1" {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	none, err := s.Latest(ctx, "boiler", "absent", query.MaxBytes)
	if err != nil || len(none) != 0 {
		t.Fatalf("latest of absent input = %+v, %v", none, err)
	}

	// The numeric projection: numbers and booleans, nothing for objects.
	var sum float64
	var n uint64
	if err := s.pipe.conn().QueryRow(ctx, "SELECT sum(value_num), count(value_num) FROM "+s.db+".input_values WHERE entity = 'boiler' AND input = 'temp'").Scan(&sum, &n); err != nil {
		t.Fatal(err)
	}
	if sum != 22.5 || n != 2 {
		t.Fatalf("sum(value_num) = %v over %d rows, want 22.5 over 2", sum, n)
	}
	var kinds string
	if err := s.pipe.conn().QueryRow(ctx, "SELECT arrayStringConcat(groupArray(toString(value_type)), ',') FROM (SELECT value_type FROM "+s.db+".input_values WHERE entity = 'boiler' ORDER BY ts_ns)").Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	if kinds != "number,bool,object,string" {
		t.Fatalf("value_type in arrival order = %s", kinds)
	}

	found, err := s.StoredEvents(ctx, []string{"boiler"}, []string{"e1", "e4", "nope"}, base, base+10)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 || found["e1"] != Stored || found["e4"] != Stored {
		t.Fatalf("StoredEvents = %v, want e1 and e4", found)
	}
}

func TestMessagesNewestFirst(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	base := time.Now().UnixNano()
	rows := []MessageRow{
		{Serial: "d1", TsNs: base, EventID: "a", Payload: []byte(`{"serial":"d1","data":{"t":1}}`), Outcome: "ok"},
		{Serial: "d1", TsNs: base + 1e6, EventID: "b", Payload: []byte(`{"serial":"d1","data":{"t":2}}`), Outcome: "ok"},
		{Serial: "d2", TsNs: base, EventID: "c", Payload: []byte(`{}`), Outcome: "ok"},
	}
	if err := s.InsertMessages(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// A replay of "b" must not show twice.
	if err := s.InsertMessages(ctx, rows[1:2]); err != nil {
		t.Fatal(err)
	}
	msgs, next, err := s.Messages(ctx, "d1", 10, query.MaxBytes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].EventID != "b" || msgs[1].EventID != "a" || next != 0 {
		t.Fatalf("messages = %+v (next %d), want b then a, and no next page", msgs, next)
	}
	if string(msgs[1].Payload) != `{"serial":"d1","data":{"t":1}}` {
		t.Fatalf("payload = %s", msgs[1].Payload)
	}
	// Paged by limit: b, then from its cursor a.
	msgs, next, err = s.Messages(ctx, "d1", 1, query.MaxBytes, 0)
	if err != nil || len(msgs) != 1 || msgs[0].EventID != "b" || next != base+1e6 {
		t.Fatalf("first page of 1: %+v next %d (%v)", msgs, next, err)
	}
	msgs, next, err = s.Messages(ctx, "d1", 1, query.MaxBytes, next)
	if err != nil || len(msgs) != 1 || msgs[0].EventID != "a" || next != 0 {
		t.Fatalf("second page of 1: %+v next %d (%v)", msgs, next, err)
	}
}

// A page holds about query.MaxBytes of payloads: five messages of 1.5 MiB
// come two, two and one, each read once, whatever the limit.
func TestMessagesPagedByBytes(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	base := time.Now().UnixNano()
	var rows []MessageRow
	for i := range 5 {
		payload := `{"serial":"big","data":{"x":"` + strings.Repeat(string(rune('a'+i)), 3<<19) + `"}}`
		rows = append(rows, MessageRow{Serial: "big", TsNs: base + int64(i)*1e6, EventID: fmt.Sprint("m", i), Payload: []byte(payload), Outcome: "ok"})
	}
	if err := s.InsertMessages(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var pages [][]string
	for before := int64(0); ; {
		msgs, next, err := s.Messages(ctx, "big", 10000, query.MaxBytes, before)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.EventID)
			if len(m.Payload) != len(rows[0].Payload) {
				t.Fatalf("%s: payload of %d bytes, want %d", m.EventID, len(m.Payload), len(rows[0].Payload))
			}
		}
		pages = append(pages, ids)
		if next == 0 || len(pages) > 5 {
			break
		}
		before = next
	}
	if got := fmt.Sprint(pages); got != "[[m4 m3] [m2 m1] [m0]]" {
		t.Fatalf("pages %s, want [[m4 m3] [m2 m1] [m0]]", got)
	}
}

// The workspace reads run as a user that cannot write, with bounded time
// and memory.
func TestReadsAreReadOnly(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	settings := map[string]string{}
	rows, err := s.reads.conn().Query(ctx, "SELECT name, value FROM system.settings WHERE name IN ('readonly', 'max_execution_time', 'max_memory_usage')")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		settings[k] = v
	}
	rows.Close()
	if settings["readonly"] != "2" || settings["max_execution_time"] != "10" || settings["max_memory_usage"] != "1000000000" {
		t.Fatalf("reader's settings %v, want readonly 2, max_execution_time 10, max_memory_usage 1e9", settings)
	}
	err = s.reads.conn().Exec(ctx, "CREATE TABLE "+s.db+".intruder (x UInt8) ENGINE = Memory")
	if err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Fatalf("the reader created a table: %v", err)
	}
}

// CLICKHOUSE_URL gives the addresses, user, database and TLS; the insert
// quorum is a majority of one shard's replicas.
func TestURLAndQuorum(t *testing.T) {
	for _, tc := range []struct {
		url        string
		replicated bool
		cluster    string
		addrs      int
		user, db   string
		tls        bool
		quorum     int
	}{
		{"clickhouse://127.0.0.1:9000/ev", false, "", 1, "default", "ev", false, 0},
		{"clickhouse://w@a:9000,b:9000,c:9000/ev", false, "", 3, "w", "ev", false, 0},
		{"clickhouse://w@a:9000,b:9000,c:9000/ev?secure=true", true, "", 3, "w", "ev", true, 2},
		{"clickhouse://w@a:9000,b:9000/ev", true, "", 2, "w", "ev", false, 2},
		{"clickhouse://w@a:9000,b:9000,c:9000,d:9000,e:9000/ev", true, "", 5, "w", "ev", false, 3},
		{"clickhouse://w@a:9000,b:9000/ev", true, "events", 2, "w", "ev", false, 0},
		{"clickhouse://w@a:9000,b:9000,c:9000,d:9000/ev?insert_quorum=2", true, "events", 4, "w", "ev", false, 2},
		{"clickhouse://w@a:9000,b:9000,c:9000/ev?insert_quorum=0", true, "", 3, "w", "ev", false, 0},
	} {
		c := Config{URL: tc.url, Replicated: tc.replicated, Cluster: tc.cluster}
		if err := c.Parse(); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if len(c.addrs) != tc.addrs || c.User != tc.user || c.Database != tc.db || c.TLS != tc.tls || c.Quorum() != tc.quorum {
			t.Errorf("%s: %d addresses, user %q, database %q, TLS %v, quorum %d; want %d, %q, %q, %v, %d",
				tc.url, len(c.addrs), c.User, c.Database, c.TLS, c.Quorum(), tc.addrs, tc.user, tc.db, tc.tls, tc.quorum)
		}
	}
	for url, want := range map[string]string{
		"clickhouse://u:pw@h:9000/ev":            "must not hold a password",
		"http://h:9000/ev":                       "must be clickhouse://",
		"clickhouse://h:9000/":                   "must name a database",
		"clickhouse://h:9000/ev?insert_quorum=2": "needs CLICKHOUSE_REPLICATED",
		// Written into every statement unquoted: refused at start, not
		// a syntax error on each.
		"clickhouse://h:9000/device-events": "database must be letters, digits and '_'",
		"clickhouse://h:9000/dev.events":    "database must be letters, digits and '_'",
		"clickhouse://h:9000/ev;DROP":       "database must be letters, digits and '_'",
		"clickhouse://h:9000/1ev":           "database must be letters, digits and '_'",
		"clickhouse://h:9000/%C3%A9v":       "database must be letters, digits and '_'",
	} {
		if err := (Config{URL: url}).Validate(); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "pw") {
			t.Errorf("%s: %v, want an error saying %q (and not the password)", url, err, want)
		}
	}
	for _, cluster := range []string{"it's", `a\b`, "a b"} {
		c := Config{URL: "clickhouse://h:9000/ev", Replicated: true, Cluster: cluster}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "CLICKHOUSE_CLUSTER must be") {
			t.Errorf("cluster %q: %v", cluster, err)
		}
	}
	for _, ok := range []Config{{URL: "clickhouse://h:9000/device_events_2"}, {URL: "clickhouse://h:9000/_ev", Replicated: true, Cluster: "prod-eu.1"}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%s, cluster %q: %v", ok.URL, ok.Cluster, err)
		}
	}
}

// A deployment of the previous release is upgraded in place: its tables,
// as that release created them (writer-worker/schema/testdata), end up with
// exactly the columns this release creates.
func TestUpgradesThePreviousReleasesSchema(t *testing.T) {
	fresh := openTest(t)
	addr, db := testenv.ClickHouseDB(t)
	old, err := os.ReadFile("../../schema/testdata/1.0.0.sql")
	if err != nil {
		t.Fatal(err)
	}
	prev, err := Open(Config{URL: "clickhouse://default@" + addr + "/" + db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prev.Close() })
	ctx := context.Background()
	for _, stmt := range schema.Release(string(old), db) {
		if err := prev.pipe.conn().Exec(ctx, stmt); err != nil {
			t.Fatalf("the 1.0.0 schema: %v", err)
		}
	}
	if err := prev.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	columns := func(s *Store) []string {
		rows, err := s.pipe.conn().Query(ctx, "SELECT table, name, type, default_kind, default_expression FROM system.columns WHERE database = ? ORDER BY table, name", s.db)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var table, name, typ, kind, expr string
			if err := rows.Scan(&table, &name, &typ, &kind, &expr); err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.Join([]string{table, name, typ, kind, expr}, " "))
		}
		return out
	}
	if got, want := columns(prev), columns(fresh); !reflect.DeepEqual(got, want) || len(want) < 20 {
		t.Fatalf("upgraded columns:\n%s\nfresh:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
