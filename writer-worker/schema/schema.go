// Package schema is the service's ClickHouse schema: writer-worker applies
// it at start, tests use it to put a table they broke back, bench/chcost
// measures inserts into it. It lies outside internal/ for those two.
package schema

import (
	_ "embed"
	"strings"
)

//go:embed schema.sql
var schema string

// Statements returns the schema's statements for database db, in order,
// with "--" comments removed (the schema holds no "--" inside a string).
func Statements(db string) []string {
	var b strings.Builder
	for _, l := range strings.Split(schema, "\n") {
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
