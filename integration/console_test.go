package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestConsole drives the console in Debian's chromium (playwright-core,
// console/test/console.test.mjs) against a whole stack: what a new user does
// after `make run`. The browser script asserts every step; this test fails
// when it does, or when the browser or the built console is missing (`make
// test` installs and builds both). Screenshots go to
// .run/console-screenshots (docs/screenshots holds a copy).
func TestConsole(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	for _, need := range []string{
		chromium,
		filepath.Join(root, "console", "node_modules", "playwright-core"),
		filepath.Join(root, "ingest-api", "internal", "console", "dist", "index.html"),
	} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%s is missing: run `make test` (it installs chromium and builds the console), or `make console` and apt-get install chromium", need)
		}
	}
	s := startStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // about 1.5 min on a busy 2-core machine
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "test/console.test.mjs")
	cmd.Dir = filepath.Join(root, "console")
	cmd.Env = append(os.Environ(),
		"CONSOLE_BASE="+s.ws,
		"DEVICE_BASE="+s.base,
		"ADMIN_TOKEN="+adminToken,
		"CHROMIUM="+chromium,
		"SCREENSHOTS="+filepath.Join(root, ".run", "console-screenshots"))
	out, err := cmd.CombinedOutput()
	t.Logf("browser test output:\n%s", out)
	if err != nil {
		t.Fatalf("browser test: %v", err)
	}
}
