package testenv

import (
	"strings"
	"testing"
)

// The rules drop what a cut says, one way, and only that; loss applies to
// every pair not cut.
func TestFirewallRules(t *testing.T) {
	f := &Firewall{parties: map[string]party{"a": {uid: 101, ports: []int{4222, 6222}}, "b": {uid: 102, ports: []int{4223}}, "c": {uid: 103}},
		cuts: map[[2]string]bool{{"a", "b"}: true}}
	got := f.rules()
	for _, want := range []string{
		"meta skuid 101 ct state new ct mark set 101\n",
		"meta skuid 102 ct state new ct mark set 102\n",
		"meta skuid 101 tcp dport { 4223 } counter drop\n", // a's connections to b
		"meta skuid 101 ct mark 102 counter drop\n",        // a's packets on b's connections
		// a link in front of a's ports, on b's connections
		"meta skuid != 101 ct mark 102 tcp sport { 4222, 6222 } counter drop\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rules lack %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "drop"); n != 3 {
		t.Errorf("%d drop rules, want 3 (a to b only):\n%s", n, got)
	}
	f.loss = 20
	got = f.rules()
	if !strings.Contains(got, "meta skuid 102 tcp dport { 4222, 6222 } numgen random mod 100 < 20 counter drop\n") ||
		!strings.Contains(got, "meta skuid 103 ct mark 101 numgen random mod 100 < 20 counter drop\n") {
		t.Errorf("loss rules missing:\n%s", got)
	}
	if strings.Contains(got, "meta skuid 101 tcp dport { 4223 } numgen") {
		t.Errorf("a cut pair also got a loss rule:\n%s", got)
	}
	// The cut's 3, then 3 for b to a; 2 for each pair with c: towards c
	// (no ports) only c's connections can be matched, and from c no link
	// answers.
	if n := strings.Count(got, "drop"); n != 3+3+4*2 {
		t.Errorf("%d drop rules, want 14:\n%s", n, got)
	}
}
