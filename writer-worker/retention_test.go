package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/devicehub/eventservice/integration/testenv"
)

// The operator's subcommand records a period and prints every recorded
// one; it refuses a kind it does not know.
func TestRetentionSubcommand(t *testing.T) {
	addr, db := testenv.ClickHouseDB(t)
	url := "-clickhouse-url=clickhouse://default@" + addr + "/" + db
	if err := retentionCommand([]string{url, "-set", "readings=120d,idempotency=48h"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := retentionCommand([]string{url}, &out); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if len(got) != 2 || got["readings"] != "120d" || got["idempotency"] != "2d" {
		t.Errorf("recorded periods printed as %v, want readings=120d and idempotency=2d", got)
	}
	if err := retentionCommand([]string{url, "-set", "audit=1d"}, &bytes.Buffer{}); err == nil {
		t.Error("-set audit=1d accepted (the audit trail's period is its stream's)")
	}
}
