package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// -h, and any mistyped flag, print the usage text with every setting's
// default, which is the environment's value: no password may be among them.
func TestUsageShowsNoSecret(t *testing.T) {
	secrets := map[string]string{
		"CLICKHOUSE_PASSWORD":      "ch-pw-4d1a9c07",
		"CLICKHOUSE_READ_PASSWORD": "ch-read-pw-0b6e3f52",
		"NATS_PASSWORD":            "nats-pw-7c2e90ab",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{{"-h"}, {"-no-such-flag"}} {
		var out bytes.Buffer
		fs := envflag.New("writer-worker")
		fs.FS.SetOutput(&out)
		var c Config
		c.Register(fs)
		_ = fs.Parse(args)
		if !strings.Contains(out.String(), "(env CLICKHOUSE_PASSWORD)") {
			t.Fatalf("%v: no usage text:\n%s", args, out.String())
		}
		for name, secret := range secrets {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%v prints %s", args, name)
			}
		}
		if c.ClickHouse.Password != secrets["CLICKHOUSE_PASSWORD"] {
			t.Errorf("%v: CLICKHOUSE_PASSWORD lost its value", args)
		}
	}
}
