package envflag

import (
	"strings"
	"testing"
	"time"
)

// A setting's default comes from its environment variable, a flag beats
// both, and an environment value that does not parse is the error Parse
// returns, naming the variable.
func TestEnvironmentThenFlags(t *testing.T) {
	t.Setenv("T_INT", "7")
	t.Setenv("T_DUR", "250ms")
	t.Setenv("T_BOOL", "true")
	s := New("t")
	var i int
	var d time.Duration
	var b bool
	var str string
	var f float64
	var n int64
	s.Int(&i, "t-int", 1, "")
	s.Duration(&d, "t-dur", time.Second, "")
	s.Bool(&b, "t-bool", false, "")
	s.String(&str, "t-str", "x", "")
	s.Float64(&f, "t-float", 1.5, "")
	s.Int64(&n, "t-int64", 9, "")
	if err := s.Parse([]string{"-t-str", "flag"}); err != nil {
		t.Fatal(err)
	}
	if i != 7 || d != 250*time.Millisecond || !b || str != "flag" || f != 1.5 || n != 9 {
		t.Fatalf("got %d %s %v %q %v %d", i, d, b, str, f, n)
	}
	t.Setenv("T_BAD", "abc")
	bad := New("t")
	var x int
	bad.Int(&x, "t-bad", 1, "")
	if err := bad.Parse(nil); err == nil || !strings.HasPrefix(err.Error(), `T_BAD="abc"`) {
		t.Fatalf("a bad environment value: %v", err)
	}
}
