package integration

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// Every setting of every program (its flags, each with an environment
// variable of the same name) is in docs/configuration.md's table, and
// invalid configuration stops a program at start with one line.
func TestConfiguration(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The tables' rows: | `NAME`, `NAME` | default | programs | meaning |.
	documented := map[string]map[string]bool{} // program -> settings
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		for _, p := range []string{"ingest", "mapper", "writer"} {
			if !strings.Contains(cells[3], p) && strings.TrimSpace(cells[3]) != "all" {
				continue
			}
			for _, m := range regexp.MustCompile("`([A-Z0-9_]+)`").FindAllStringSubmatch(cells[1], -1) {
				if documented[p] == nil {
					documented[p] = map[string]bool{}
				}
				documented[p][m[1]] = true
			}
		}
	}
	envName := regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	all := map[string]bool{}
	for _, p := range []string{"ingest-api", "mapper-worker", "writer-worker"} {
		out, _ := exec.Command(filepath.Join(binDir, p), "-h").CombinedOutput()
		names := envName.FindAllStringSubmatch(string(out), -1)
		if len(names) < 10 {
			t.Fatalf("%s -h lists %d settings:\n%s", p, len(names), out)
		}
		short, _, _ := strings.Cut(p, "-")
		registered := map[string]bool{}
		for _, m := range names {
			registered[m[1]], all[m[1]] = true, true
			if !documented[short][m[1]] {
				t.Errorf("%s setting %s is not in docs/configuration.md for %s", p, m[1], short)
			}
		}
		for name := range documented[short] {
			if !registered[name] {
				t.Errorf("docs/configuration.md says %s reads %s; it has no such setting", p, name)
			}
		}
	}
	// 46: WORKSPACE_ADDR, the admin plane's own listener; 47: CLAIM_FIRST,
	// for the upgrade to the writers deciding (to go in the next release).
	if len(all) > 47 {
		t.Errorf("%d settings in all; at most 47", len(all))
	}

	for _, c := range []struct {
		program string
		env     []string
		want    string
	}{
		{"ingest-api", []string{"ADMIN_TOKEN="}, "ingest-api: ADMIN_TOKEN"},
		{"ingest-api", []string{"ADMIN_TOKEN=x", "MAX_IN_FLIGHT=abc"}, `ingest-api: MAX_IN_FLIGHT="abc"`},
		{"ingest-api", []string{"ADMIN_TOKEN=x"}, "ingest-api: ADMIN_TOKEN must be at least 16 bytes"},
		{"ingest-api", []string{"ADMIN_TOKEN=admin-token-0123456789", "TOKEN_KEY=too-short"}, "ingest-api: TOKEN_KEY must be at least 32 bytes"},
		{"writer-worker", []string{"IDEMPOTENCY_WINDOW=0s"}, "writer-worker: IDEMPOTENCY_WINDOW must be positive"},
		{"mapper-worker", []string{"NATS_PREFIX=a..b"}, "mapper-worker: NATS_PREFIX must be dot-separated tokens"},
		{"writer-worker", []string{"CLICKHOUSE_URL=clickhouse://u:secret@h:9000/db"}, "writer-worker: CLICKHOUSE_URL must not hold a password"},
	} {
		cmd := exec.Command(filepath.Join(binDir, c.program))
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.env...)
		out, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err == nil || len(lines) != 1 || !strings.HasPrefix(lines[0], c.want) {
			t.Errorf("%s with %v: exit %v, output %q; want one line starting %q", c.program, c.env, err, out, c.want)
		}
	}
}

// Two deployments can share a NATS server: with another prefix the
// pipeline works and uses only the names derived from it.
func TestCustomNATSNames(t *testing.T) {
	s := startStack(t, "NATS_PREFIX=fleet.eu")
	s.admin(t, http.MethodPut, "/devices/dev-EU", `{"accessToken":"tok-5f0c2b9e71d4-EU","inputs":[{"name":"t","entity":"eu","entityInput":"t"}]}`)
	expect(t, s.post(t, `{"serial":"dev-EU","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-EU")), 200, storedMsg, "")
	expect(t, s.post(t, `{"serial":"dev-EU","data":{"t":2}}`, keyHeader("tok-5f0c2b9e71d4-EU", "eu-1")), 200, storedMsg, "")
	if r := s.admin(t, http.MethodGet, "/entities/eu/inputs/t/latest", ""); r.Status != 200 {
		t.Fatalf("read through the renamed query subject: %d %s", r.Status, r.Raw)
	}
	js := testenv.OperatorJS(t, s.nats.Server().ClientURL())
	ctx := context.Background()
	var streams []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		streams = append(streams, n)
	}
	sort.Strings(streams)
	if want := []string{"FLEET_EU_AUDIT", "FLEET_EU_CLAIMS", "FLEET_EU_DEADLETTER", "FLEET_EU_DIAG", "FLEET_EU_EVENTS", "FLEET_EU_MAPPED", "KV_fleet_eu_backfills", "KV_fleet_eu_census", "KV_fleet_eu_keys", "KV_fleet_eu_registry"}; !slices.Equal(streams, want) {
		t.Fatalf("streams %v, want %v", streams, want)
	}
	// The keyed reading's claim is in the renamed stream, under the prefix.
	claims, err := js.Stream(ctx, "FLEET_EU_CLAIMS")
	if err != nil {
		t.Fatal(err)
	}
	if info := claims.CachedInfo(); info.State.Msgs != 1 || !slices.Equal(info.Config.Subjects, []string{"fleet.eu.claims.*"}) {
		t.Fatalf("claims stream holds %d messages on %v, want 1 on [fleet.eu.claims.*]", info.State.Msgs, info.Config.Subjects)
	}
	for stream, consumer := range map[string]string{"FLEET_EU_EVENTS": "mapper", "FLEET_EU_MAPPED": "writer", "FLEET_EU_DIAG": "diag"} {
		var got []string
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		lister := st.ConsumerNames(ctx)
		for n := range lister.Name() {
			got = append(got, n)
		}
		if !slices.Equal(got, []string{consumer}) {
			t.Errorf("consumers of %s: %v, want [%s]", stream, got, consumer)
		}
	}
}

// HTTP_TLS_CERT and HTTP_TLS_KEY serve both listeners over HTTPS.
func TestHTTPS(t *testing.T) {
	p := testenv.NewPKI(t)
	ns := testenv.NATSControl(t)
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL(), "HTTP_TLS_CERT="+p.ServerCert, "HTTP_TLS_KEY="+p.ServerKey)
	s.nats = ns
	addr := strings.TrimPrefix(s.base, "http://")
	s.base, s.bases = "https://"+addr, []string{"https://" + addr}
	s.ws = "https://" + strings.TrimPrefix(s.ws, "http://")
	s.http = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}}}
	for _, prog := range []string{"writer-worker", "mapper-worker", "ingest-api"} {
		s.start(prog)
	}
	s.waitReady()
	if r := s.admin(t, http.MethodPut, "/devices/dev-TLS", `{"accessToken":"tok-5f0c2b9e71d4-TLS","inputs":[{"name":"t","entity":"tls","entityInput":"t"}]}`); r.Status != 200 {
		t.Fatalf("PUT over HTTPS on the workspace listener: %d %s", r.Status, r.Raw)
	}
	r := s.post(t, `{"serial":"dev-TLS","data":{"t":1}}`, bearer("tok-5f0c2b9e71d4-TLS"))
	expect(t, r, 200, storedMsg, "")
	// Plain HTTP on the TLS port is not served.
	if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on the HTTPS listener")
		}
	}
}
