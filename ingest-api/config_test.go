package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// -h, and any mistyped flag, print the usage text with every setting's
// default, which is the environment's value: no secret may be among them.
func TestUsageShowsNoSecret(t *testing.T) {
	secrets := map[string]string{
		"ADMIN_TOKEN":   "admin-5f0c2b9e71d4a8e3",
		"TOKEN_KEY":     "key-b71e0c4f9a2d63e8b71e0c4f9a2d63e8",
		"NATS_PASSWORD": "nats-pw-c83f2a1d",
		"NATS_URL":      "nats://ingest:url-pw-9e7a41@127.0.0.1:4222",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{{"-h"}, {"-no-such-flag"}, {"-max-in-flight", "x"}} {
		var out bytes.Buffer
		fs := envflag.New("ingest-api")
		fs.FS.SetOutput(&out)
		var c Config
		c.Register(fs)
		err := fs.Parse(args)
		text := out.String()
		if err != nil {
			text += err.Error()
		}
		if !strings.Contains(text, "(env ADMIN_TOKEN)") {
			t.Fatalf("%v: no usage text:\n%s", args, text)
		}
		for _, secret := range []string{"admin-5f0c2b9e71d4a8e3", "key-b71e0c4f9a2d63e8", "nats-pw-c83f2a1d", "url-pw-9e7a41"} {
			if strings.Contains(text, secret) {
				t.Errorf("%v prints the secret %q", args, secret)
			}
		}
		if c.AdminToken != secrets["ADMIN_TOKEN"] || c.NATS.Password != secrets["NATS_PASSWORD"] {
			t.Errorf("%v: the settings lost their values: %q %q", args, c.AdminToken, c.NATS.Password)
		}
	}
}

// ADMIN_TOKEN opens the whole workspace: one of fewer than 16 bytes is
// refused at start, except the development default under -dev.
func TestAdminTokenHasAMinimumLength(t *testing.T) {
	t.Setenv("TOKEN_KEY", "key-b71e0c4f9a2d63e8b71e0c4f9a2d63e8")
	for _, tc := range []struct {
		token string
		dev   bool
		want  string
	}{
		{"x", false, "ADMIN_TOKEN must be at least 16 bytes"},
		{"admin-token-0123", true, ""},
		{"0123456789abcde", false, "ADMIN_TOKEN must be at least 16 bytes"},
		{"0123456789abcdef", false, ""},
		{"dev-admin-token", true, ""},
		{"", true, ""}, // -dev's default
	} {
		var c Config
		fs := envflag.New("ingest-api")
		c.Register(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		c.AdminToken, c.Dev = tc.token, tc.dev
		err := c.Validate()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want))) {
			t.Errorf("ADMIN_TOKEN %q (dev %v): %v, want %q", tc.token, tc.dev, err, tc.want)
		}
	}
}

// A configuration error names the setting, never quotes a secret: a
// NATS_URL that does not parse holds its password in the parser's error.
func TestConfigErrorsShowNoSecret(t *testing.T) {
	t.Setenv("ADMIN_TOKEN", "admin-5f0c2b9e71d4a8e3")
	t.Setenv("TOKEN_KEY", "key-b71e0c4f9a2d63e8b71e0c4f9a2d63e8")
	t.Setenv("NATS_URL", "nats://ingest:url-pw-9e7a41@127.0.0.1:x")
	var c Config
	fs := envflag.New("ingest-api")
	c.Register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "url-pw-9e7a41") || !strings.HasPrefix(err.Error(), "NATS_URL") {
		t.Fatalf("a NATS_URL that does not parse: %v, want an error naming NATS_URL without its password", err)
	}
}
