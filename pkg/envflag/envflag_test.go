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

// A secret's value is set from the environment or a flag but never shown
// in the usage text; a URL's password in a string's default is masked.
func TestSecretsAreNotShown(t *testing.T) {
	t.Setenv("T_KEY", "k-8d1f0e")
	t.Setenv("T_URL", "nats://u:p-51c9a2@h:4222, nats://v@h2:4222")
	s := New("t")
	var out strings.Builder
	s.FS.SetOutput(&out)
	var key, url, empty string
	s.Secret(&key, "t-key", "a key")
	s.Secret(&empty, "t-empty", "unset")
	s.String(&url, "t-url", "", "servers")
	s.FS.PrintDefaults()
	if key != "k-8d1f0e" || url != "nats://u:p-51c9a2@h:4222, nats://v@h2:4222" || empty != "" {
		t.Fatalf("values %q %q %q", key, url, empty)
	}
	if text := out.String(); strings.Contains(text, "k-8d1f0e") || strings.Contains(text, "p-51c9a2") ||
		!strings.Contains(text, "(env T_KEY)") || !strings.Contains(text, `nats://u:xxxxx@h:4222, nats://v@h2:4222`) {
		t.Fatalf("usage:\n%s", text)
	}
	if err := s.Parse([]string{"-t-key", "from-flag"}); err != nil || key != "from-flag" {
		t.Fatalf("a flag sets a secret: %v %q", err, key)
	}
}
