package retention

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	p, err := Parse("readings=30d, hours=2y,audit=36h")
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want[Readings], want[Hours], want[Audit] = 30*Day, 2*Year, 36*time.Hour
	for k, d := range want {
		if p[k] != d {
			t.Errorf("%s = %v, want %v", k, p[k], d)
		}
	}
	if got := Defaults().String(); got != "readings=90d,minutes=1y,hours=10y,messages=90d,diagnostics=30d,audit=400d" {
		t.Errorf("defaults written as %q", got)
	}
	if back, err := Parse(p.String()); err != nil || back.String() != p.String() {
		t.Errorf("%q read back as %v, %v", p.String(), back, err)
	}
	for _, bad := range []string{"readings", "blobs=1d", "readings=-1d", "readings=10m", "readings=soon", "readings=2y", "minutes=20y"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
