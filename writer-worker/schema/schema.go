// Package schema is the service's ClickHouse schema: writer-worker applies
// it at start, and tests use it to put a table they broke back (it lies
// outside internal/ for them).
package schema

import (
	_ "embed"
	"strings"
)

//go:embed schema.sql
var schema string

// Statements returns the schema's statements for database db, in order,
// with "--" comments removed (the schema holds no "--" inside a string).
// They create every table with all its columns.
func Statements(db string) []string { return Release(schema, db) }

// Release splits an SQL file, this schema or a release's (testdata), into
// its statements for database db: what a deployment of that release holds.
func Release(sql, db string) []string {
	var b strings.Builder
	for _, l := range strings.Split(sql, "\n") {
		if i := strings.Index(l, "--"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimRight(l, " \t"); l != "" {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	var out []string
	for _, stmt := range strings.Split(b.String(), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, strings.ReplaceAll(stmt, "{db}", db))
		}
	}
	return out
}

// Replicated returns Statements(db) for replicated storage: every table a
// ReplicatedReplacingMergeTree of one shard, under the ZooKeeper path
// /clickhouse/tables/{shard}/<db>.<table>, its replica named by the server's
// {replica} macro. Run on every replica (each registers itself); rows
// inserted through any replica reach the others, and a block inserted twice
// (a retried insert) is stored once. deploy/clickhouse/schema-replicated.sql
// is this, for database device_events (a test keeps them equal).
func Replicated(db string) []string {
	var out []string
	for _, st := range Statements(db) {
		if strings.HasPrefix(st, "CREATE TABLE") {
			f := strings.Fields(st)
			// CREATE TABLE IF NOT EXISTS <db>.<table>
			st = replicatedEngine(st, "/clickhouse/tables/{shard}/"+f[5])
		}
		out = append(out, st)
	}
	return out
}

// replicatedEngine turns a statement's "ENGINE = <Kind>MergeTree(<args>)"
// into "ENGINE = Replicated<Kind>MergeTree('<path>', '{replica}'[, <args>])".
func replicatedEngine(st, path string) string {
	const mark = "ENGINE = "
	i := strings.Index(st, mark)
	open := strings.IndexByte(st[i:], '(') + i
	depth, end := 0, open
	for ; end < len(st); end++ {
		if st[end] == '(' {
			depth++
		} else if st[end] == ')' {
			if depth--; depth == 0 {
				break
			}
		}
	}
	engine, args := st[i+len(mark):open], st[open+1:end]
	repl := "Replicated" + engine + "('" + path + "', '{replica}'"
	if args != "" {
		repl += ", " + args
	}
	return st[:i+len(mark)] + repl + st[end:]
}

// ReplicatedFile renders Replicated("device_events") as the file operators
// apply with clickhouse-client --multiquery on each replica.
func ReplicatedFile() string {
	var b strings.Builder
	b.WriteString("-- The service's schema for replicated storage (ClickHouse 18.16 and current\n" +
		"-- releases, ZooKeeper or Keeper): one shard, every table a\n" +
		"-- ReplicatedReplacingMergeTree. Generated from writer-worker/schema\n" +
		"-- (go run ./writer-worker schema -replicated); writer-worker with\n" +
		"-- CLICKHOUSE_REPLICATED=true applies the same on every address it is given.\n" +
		"-- Each server needs the macros {shard} and {replica} (see\n" +
		"-- deploy/clickhouse/cluster.sh); run this on every replica.\n\n")
	for _, st := range Replicated("device_events") {
		b.WriteString(st)
		b.WriteString(";\n\n")
	}
	return b.String()
}

// ShardKeys are the sharding keys of the tables: every copy of an event
// lands on the shard of its first copy (see docs/sizing.md).
var ShardKeys = map[string]string{
	"input_values":        "cityHash64(entity)",
	"device_messages":     "cityHash64(serial)",
	"event_keys":          "cityHash64(event_id)",
	"device_stats":        "cityHash64(serial)",
	"device_stats_hourly": "cityHash64(serial)",
	"device_seen":         "cityHash64(serial)",
	"device_rejections":   "cityHash64(serial)",
	"device_keys":         "cityHash64(serial)",
	"input_minutes":       "cityHash64(entity)",
	"input_hours":         "cityHash64(entity)",
	"rollup_dirty":        "cityHash64(entity)",
	"retention_periods":   "cityHash64(kind)",
}

// Sharded returns the statements for sharded storage: each table as a
// replicated <table>_local (see Replicated) on every server, and under the
// table's own name a Distributed table over cluster, sharded by ShardKeys.
// Run on every server of the cluster.
func Sharded(db, cluster string) []string {
	var out []string
	for _, st := range Replicated(db) {
		if !strings.HasPrefix(st, "CREATE TABLE") {
			out = append(out, st)
			continue
		}
		// CREATE TABLE IF NOT EXISTS <db>.<table>
		full := strings.Fields(st)[5]
		_, table, _ := strings.Cut(full, ".")
		out = append(out, strings.Replace(st, full, full+"_local", 1),
			"CREATE TABLE IF NOT EXISTS "+full+" AS "+full+"_local ENGINE = Distributed('"+cluster+"', '"+db+"', '"+table+"_local', "+ShardKeys[table]+")")
	}
	return out
}
