package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Firewall cuts loopback traffic between the parties of one test, one way
// or both, and drops a share of it, with nft rules on the output hook. A
// party is the processes of one user id (a NATS node runs as a user of its
// own) and the ports it listens on: what a party sends to another is its
// packets to the other's ports (connections it opened) and its packets on
// connections the other opened (conntrack marks each connection with the
// user that opened it). A party's ports may include those of a Link in
// front of it: what the link sends back from them on another party's
// connections is the party's. The kernel here has no netem, so delay
// cannot be added this way (a Link adds it); loss can. It needs root and nft (`make partition`
// installs nftables).
type Firewall struct {
	t       testing.TB
	table   string
	mu      sync.Mutex
	parties map[string]party
	cuts    map[[2]string]bool // from, to
	loss    int                // percent dropped between every two parties
	nextUID int
}

type party struct {
	uid   int
	ports []int
}

// NewFirewall creates the test's own nft table, removed when it ends.
func NewFirewall(t testing.TB) *Firewall {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the firewall needs root")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatal("nft is missing: apt-get install nftables (make partition does)")
	}
	f := &Firewall{t: t, table: fmt.Sprintf("testenv_%d", os.Getpid()), parties: map[string]party{},
		cuts: map[[2]string]bool{}, nextUID: 200000 + os.Getpid()%100000*8}
	f.apply()
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", f.table).Run() })
	return f
}

// NewUID is a user id no other party or test run has.
func (f *Firewall) NewUID() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextUID++
	return f.nextUID
}

// Add names a party: the processes running as uid, listening on ports.
// Connections opened before it was added are not marked: add a party
// before its process starts.
func (f *Firewall) Add(name string, uid int, ports ...int) {
	f.mu.Lock()
	f.parties[name] = party{uid: uid, ports: ports}
	f.mu.Unlock()
	f.apply()
}

// Cut drops everything from sends to to (one way: to still sends).
func (f *Firewall) Cut(from, to string) {
	f.mu.Lock()
	f.cuts[[2]string{from, to}] = true
	f.mu.Unlock()
	f.apply()
}

// Isolate cuts name from every other party, both ways.
func (f *Firewall) Isolate(name string) {
	f.mu.Lock()
	for other := range f.parties {
		if other != name {
			f.cuts[[2]string{name, other}] = true
			f.cuts[[2]string{other, name}] = true
		}
	}
	f.mu.Unlock()
	f.apply()
}

// Loss drops pct percent of the packets between every two parties, at
// random, each way.
func (f *Firewall) Loss(pct int) {
	f.mu.Lock()
	f.loss = pct
	f.mu.Unlock()
	f.apply()
}

// Heal removes every cut and the loss, and returns how many packets they
// dropped (proof that they were done).
func (f *Firewall) Heal() (dropped int) {
	dropped = f.dropped()
	f.mu.Lock()
	clear(f.cuts)
	f.loss = 0
	f.mu.Unlock()
	f.apply()
	return dropped
}

// dropped is the sum of the drop rules' packet counters.
func (f *Firewall) dropped() int {
	f.t.Helper()
	out, err := exec.Command("nft", "list", "table", "inet", f.table).CombinedOutput()
	if err != nil {
		f.t.Fatalf("nft list: %v: %s", err, out)
	}
	n := 0
	for _, m := range counterRE.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

var counterRE = regexp.MustCompile(`counter packets (\d+) bytes \d+ drop`)

// apply replaces the table in one nft transaction.
func (f *Firewall) apply() {
	f.t.Helper()
	f.mu.Lock()
	rules := f.rules()
	f.mu.Unlock()
	script := fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\ntable inet %[1]s {\n chain out {\n  type filter hook output priority 0; policy accept;\n%[2]s }\n}\n",
		f.table, rules)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("nft: %v: %s\n%s", err, out, script)
	}
}

// rules are the chain's rules: each party's new connections marked with
// its uid, then each cut, then the loss.
func (f *Firewall) rules() string {
	var b strings.Builder
	names := make([]string, 0, len(f.parties))
	for n := range f.parties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  meta skuid %d ct state new ct mark set %d\n", f.parties[n].uid, f.parties[n].uid)
	}
	drop := func(from, to party, extra string) {
		if len(to.ports) > 0 {
			fmt.Fprintf(&b, "  meta skuid %d tcp dport { %s } %scounter drop\n", from.uid, joinInts(to.ports), extra)
		}
		fmt.Fprintf(&b, "  meta skuid %d ct mark %d %scounter drop\n", from.uid, to.uid, extra)
		if len(from.ports) > 0 { // a link in front of from's ports answering to's connections
			fmt.Fprintf(&b, "  meta skuid != %d ct mark %d tcp sport { %s } %scounter drop\n", from.uid, to.uid, joinInts(from.ports), extra)
		}
	}
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			if f.cuts[[2]string{from, to}] {
				drop(f.parties[from], f.parties[to], "")
			} else if f.loss > 0 {
				drop(f.parties[from], f.parties[to], fmt.Sprintf("numgen random mod 100 < %d ", f.loss))
			}
		}
	}
	return b.String()
}

// ownDir is a directory that a process of another user can reach (a
// test's TempDir lies under directories only the test's user may enter),
// removed when the test ends.
func ownDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// chownAll gives dir and everything in it to uid.
func chownAll(t testing.TB, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, p := range v {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ")
}
