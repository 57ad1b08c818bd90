package schema

import (
	"os"
	"strings"
	"testing"
)

func TestStatements(t *testing.T) {
	st := Statements("db1")
	if len(st) != 4 || !strings.HasPrefix(st[0], "CREATE DATABASE IF NOT EXISTS db1") {
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
		if strings.Contains(repl[i], "ENGINE = ReplacingMergeTree()") || !strings.Contains(repl[i], "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/device_events.") {
			t.Errorf("table not replicated: %s", repl[i])
		}
		engine := repl[i][strings.Index(repl[i], "ENGINE = "):]
		engine = engine[:strings.Index(engine, "\n")]
		if strings.Replace(repl[i], engine, "ENGINE = ReplacingMergeTree()", 1) != single[i] {
			t.Errorf("statement %d differs beyond its engine", i)
		}
	}
	if tables != 3 {
		t.Errorf("%d tables, want 3", tables)
	}
	file, err := os.ReadFile("../../deploy/clickhouse/schema-replicated.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(file), ReplicatedFile(); got != want {
		t.Errorf("deploy/clickhouse/schema-replicated.sql is not the replicated schema: run `go run ./writer-worker schema -replicated > deploy/clickhouse/schema-replicated.sql`")
	}
}
