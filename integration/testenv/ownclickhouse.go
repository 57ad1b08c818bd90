package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// OwnClickHouse starts a ClickHouse server for this test alone with
// deploy/clickhouse/server.sh, on free loopback ports, its <timezone> set
// to zone (a server west of UTC, say), and stops it when the test ends. It
// returns the server's native address. A test that can run on the shared
// server uses ClickHouseDB instead: a server of its own costs seconds.
func OwnClickHouse(t testing.TB, zone string) string {
	t.Helper()
	ClickHouseAddr(t) // the run has ClickHouse (clickhouse-server installed)
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("find the module root: %v", err)
	}
	script := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "deploy", "clickhouse", "server.sh")
	dir := t.TempDir()
	tcp, http := FreePort(t), FreePort(t)
	cmd := exec.Command(script, "start", dir, fmt.Sprint(tcp), fmt.Sprint(http))
	cmd.Env = append(os.Environ(), "CLICKHOUSE_TIMEZONE="+zone)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start a ClickHouse server in %s: %v\n%s", zone, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Logf("stop the ClickHouse server in %s: %v\n%s", zone, err, out)
		}
	})
	return fmt.Sprintf("127.0.0.1:%d", tcp)
}
