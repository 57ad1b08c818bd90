package version

import (
	"os"
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
