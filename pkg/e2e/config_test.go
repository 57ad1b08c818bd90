package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every setting of every program (its flags, each with an environment
// variable of the same name) is in the README's configuration table, and
// invalid configuration stops a program at start with one line.
func TestConfiguration(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	envName := regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	for _, p := range []string{"ingest-api", "mapper-worker", "writer-worker"} {
		out, _ := exec.Command(filepath.Join(binDir, p), "-h").CombinedOutput()
		names := envName.FindAllStringSubmatch(string(out), -1)
		if len(names) < 10 {
			t.Fatalf("%s -h lists %d settings:\n%s", p, len(names), out)
		}
		for _, m := range names {
			if !strings.Contains(table, "`"+m[1]+"`") {
				t.Errorf("%s setting %s is not in the README's configuration table", p, m[1])
			}
		}
	}

	for _, c := range []struct {
		program string
		env     []string
		want    string
	}{
		{"ingest-api", []string{"ADMIN_TOKEN="}, "ingest-api: ADMIN_TOKEN"},
		{"ingest-api", []string{"ADMIN_TOKEN=x", "MAX_IN_FLIGHT=abc"}, `ingest-api: MAX_IN_FLIGHT="abc"`},
		{"writer-worker", []string{"IDEMPOTENCY_WINDOW=0s"}, "writer-worker: IDEMPOTENCY_WINDOW and KEYED_RETRY_DELAY must be positive"},
		{"mapper-worker", []string{"NATS_DEDUPE_WINDOW=48h"}, "mapper-worker: NATS_DEDUPE_WINDOW must be positive and at most NATS_STREAM_MAX_AGE"},
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
