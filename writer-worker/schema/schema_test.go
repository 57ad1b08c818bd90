package schema

import (
	"reflect"
	"strings"
	"testing"
)

func TestStatementsAndAddedColumns(t *testing.T) {
	st := Statements("db1")
	if len(st) != 4 || !strings.HasPrefix(st[0], "CREATE DATABASE IF NOT EXISTS db1") {
		t.Fatalf("statements %q", st)
	}
	for _, s := range st {
		if strings.Contains(s, "{db}") || strings.Contains(s, "--") || strings.HasPrefix(s, "ALTER") {
			t.Fatalf("statement %q", s)
		}
	}
	var got []string
	for _, c := range Added("db1") {
		got = append(got, c.Table+"."+c.Name)
		if !strings.HasPrefix(c.Add, "ALTER TABLE db1."+c.Table+" ADD COLUMN "+c.Name+" ") {
			t.Fatalf("added column %+v", c)
		}
		// A fresh table has it already.
		if !strings.Contains(strings.Join(st, "\n"), "\n    "+c.Name+" ") {
			t.Fatalf("the CREATE statements lack %s", c.Name)
		}
	}
	if want := []string{"input_values.received_ns", "device_messages.reading_ns", "device_messages.time_note"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("added columns %v, want %v", got, want)
	}
}
