package program

import (
	"os"
	"path/filepath"
	"testing"
)

// A container's limit is read from cgroup v2 or v1; "max" and v1's huge
// "unlimited" mean none.
func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	defer func(files []string) { cgroupLimitFiles = files }(cgroupLimitFiles)
	for _, tc := range []struct {
		content string
		want    int64
	}{
		{"268435456\n", 268435456},
		{"max\n", 0},
		{"9223372036854771712\n", 0},
		{"", 0},
	} {
		p := filepath.Join(dir, "limit")
		if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		cgroupLimitFiles = []string{p}
		if got := cgroupLimit(); got != tc.want {
			t.Errorf("%q: %d, want %d", tc.content, got, tc.want)
		}
	}
	cgroupLimitFiles = []string{filepath.Join(dir, "missing")}
	if got := cgroupLimit(); got != 0 {
		t.Errorf("missing file: %d", got)
	}
}
