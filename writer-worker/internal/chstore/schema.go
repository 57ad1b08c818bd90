// schema.go embeds the service's ClickHouse schema, applied by Migrate.
// writer-worker applies exactly the file operators read under deploy/.
package chstore

import (
	_ "embed"
	"strings"
)

//go:embed schema.sql
var schema string

// Statements returns the schema's statements for database db, in order,
// with "--" comments removed (the schema holds no "--" inside a string).
func schemaStatements(db string) []string {
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
