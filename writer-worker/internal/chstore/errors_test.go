package chstore

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/devicehub/eventservice/pkg/failure"
)

// Data the table refuses is a permanent failure; a server that cannot be
// reached, or a table that is missing, is transient.
func TestFailureKinds(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	row := []ValueRow{{Entity: "e", Input: "i", TsNs: 1, Serial: "longer-than-four", DeviceInput: "d", EventID: "x", JSON: json.RawMessage(`1`)}}
	if err := s.pipe.conn().Exec(ctx, "ALTER TABLE "+s.db+".input_values MODIFY COLUMN serial FixedString(4)"); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertValues(ctx, row); failure.KindOf(err) != failure.Permanent {
		t.Fatalf("a value too long for its column: %v, transient; want permanent", err)
	}
	if err := s.InsertMessages(ctx, []MessageRow{{Serial: "s", EventID: "x", Payload: []byte(`{}`), Outcome: "ok"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.pipe.conn().Exec(ctx, "DROP TABLE "+s.db+".device_messages"); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertMessages(ctx, []MessageRow{{Serial: "s", EventID: "y", Payload: []byte(`{}`), Outcome: "ok"}}); err == nil || failure.KindOf(err) != failure.Transient {
		t.Fatalf("a missing table: %v, want a transient failure", err)
	}
	down, err := Open(Config{URL: "clickhouse://default@127.0.0.1:1/" + s.db})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	if err := down.InsertValues(ctx, row); err == nil || failure.KindOf(err) != failure.Transient {
		t.Fatalf("no server: %v, want a transient failure", err)
	}
}
