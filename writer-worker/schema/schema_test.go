package schema

import (
	"os"
	"strings"
	"testing"
)

func TestStatements(t *testing.T) {
	st := Statements("db1")
	if len(st) != 13 || !strings.HasPrefix(st[0], "CREATE DATABASE IF NOT EXISTS db1") {
		t.Fatalf("statements %q", st)
	}
	for _, s := range st {
		if strings.Contains(s, "{db}") || strings.Contains(s, "--") || !strings.HasPrefix(s, "CREATE ") {
			t.Fatalf("statement %q", s)
		}
	}
}

// The replicated schema has the single-server schema's tables and columns,
// each table replicated; the file operators apply is exactly it.
func TestReplicated(t *testing.T) {
	single, repl := Statements("device_events"), Replicated("device_events")
	if len(single) != len(repl) {
		t.Fatalf("%d statements, single-server %d", len(repl), len(single))
	}
	tables := 0
	for i := range repl {
		if !strings.HasPrefix(repl[i], "CREATE TABLE") {
			if repl[i] != single[i] {
				t.Errorf("statement %d differs: %s", i, repl[i])
			}
			continue
		}
		tables++
		// CREATE TABLE IF NOT EXISTS device_events.<table>
		table := strings.Fields(repl[i])[5]
		line := func(st string) string {
			e := st[strings.Index(st, "ENGINE = "):]
			return e[:strings.Index(e, "\n")]
		}
		engine := line(repl[i])
		// Without "Replicated" and its path and replica, the engine is
		// the single server's, arguments and all.
		back := strings.Replace(strings.Replace(engine, "Replicated", "", 1), "'/clickhouse/tables/{shard}/"+table+"', '{replica}'", "", 1)
		back = strings.Replace(back, "(, ", "(", 1)
		if !strings.HasPrefix(engine, "ENGINE = Replicated") || back != line(single[i]) {
			t.Errorf("table not replicated: %s", engine)
		}
		if strings.Replace(repl[i], engine, line(single[i]), 1) != single[i] {
			t.Errorf("statement %d differs beyond its engine", i)
		}
	}
	if tables != 12 {
		t.Errorf("%d tables, want 12", tables)
	}
	file, err := os.ReadFile("../../deploy/clickhouse/schema-replicated.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(file), ReplicatedFile(); got != want {
		t.Errorf("deploy/clickhouse/schema-replicated.sql is not the replicated schema: run `go run ./writer-worker schema -replicated > deploy/clickhouse/schema-replicated.sql`")
	}
}
