package version

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The VERSION file and the compiled-in Version agree, and CHANGELOG.md has
// a section for it.
func TestVersionMatchesTheRepository(t *testing.T) {
	raw, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(raw)); got != Version {
		t.Fatalf("VERSION says %q, the code %q", got, Version)
	}
	log, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "## ["+Version+"]") {
		t.Fatalf("CHANGELOG.md has no section for %s", Version)
	}
}

// The repository's house rules, checked on every file git tracks: no
// binary, no non-test Go file over 300 lines, a README that stays a short
// front page (200 lines).
func TestRepositoryHygiene(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files").Output()
	if err != nil {
		t.Skipf("no git checkout: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			continue // deleted in the working tree
		}
		lines := bytes.Count(b, []byte("\n"))
		switch {
		case bytes.HasPrefix(b, []byte("\x7fELF")) || bytes.HasPrefix(b, []byte("MZ")):
			t.Errorf("%s is a binary: build outputs stay out of the repository", f)
		case strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") && lines > 300:
			t.Errorf("%s has %d lines: split it (at most 300)", f, lines)
		case f == "README.md" && lines > 200:
			t.Errorf("README.md has %d lines: keep it a short front page (at most 200; details live in docs/)", lines)
		}
	}
}

// `make bench` and the scripts it runs leave the tree as they found it:
// every file they write under bench/ is one git ignores (a run's numbers
// are copied into the tracked bench/results.txt by whoever quotes them).
func TestBenchmarksLeaveTheTreeClean(t *testing.T) {
	if err := exec.Command("git", "-C", "../..", "rev-parse").Run(); err != nil {
		t.Skipf("no git checkout: %v", err)
	}
	target := regexp.MustCompile(`(?:-out|tee(?: -a)?|>>?)\s+"?(bench/[\w./-]+)`)
	seen := 0
	for _, f := range []string{"Makefile", "deploy/dev/bench.sh", "deploy/dev/bench-backfill.sh", "deploy/dev/flood.sh"} {
		b, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range target.FindAllSubmatch(b, -1) {
			seen++
			if err := exec.Command("git", "-C", "../..", "check-ignore", "-q", string(m[1])).Run(); err != nil {
				t.Errorf("%s writes %s, which git does not ignore: a run leaves the tree dirty", f, m[1])
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found %d files written under bench/; the pattern no longer matches the scripts", seen)
	}
}
