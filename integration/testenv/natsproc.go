package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSProc is a nats-server running as a process of its own (the version in
// go.mod, built once per test run), so that a test can do to it what happens
// to a machine: pause it (SIGSTOP, a stall), kill it, start it again on its
// data. Its users and permissions are the deployment's (deploy/nats/auth.conf),
// with the passwords NATSPassword gives.
type NATSProc struct {
	t       testing.TB
	name    string
	port    int
	monitor int    // its HTTP monitoring port
	dir     string // its config and data
	uid     int    // the user it runs as (0: the test's own)
	disk    *disk  // its data's own file system (nil: the test's)
	// links in front of its client and cluster ports (nil: none)
	clientLink, routeLink *Link
	bin                   string
	cmd                   *exec.Cmd
	exited                chan struct{}
	stopped               bool
}

var natsBinary struct {
	once sync.Once
	path string
	err  error
}

// natsServerBinary builds nats-server from the module's version once.
func natsServerBinary(t testing.TB) string {
	t.Helper()
	root := moduleDir(t)
	natsBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "testenv-nats-")
		if err == nil {
			err = os.Chmod(dir, 0o755) // a node may run as a user of its own
		}
		if err != nil {
			natsBinary.err = err
			return
		}
		natsBinary.path = filepath.Join(dir, "nats-server")
		cmd := exec.Command("go", "build", "-o", natsBinary.path, "github.com/nats-io/nats-server/v2")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			natsBinary.err = fmt.Errorf("build nats-server: %v: %s", err, b)
		}
	})
	if natsBinary.err != nil {
		t.Fatal(natsBinary.err)
	}
	return natsBinary.path
}

// ProcCluster says how NATSProcesses runs the nodes.
type ProcCluster struct {
	Nodes int
	// SyncInterval is how often each node fsyncs its store ("": the
	// server's default, every 2 minutes; "always": before each ack).
	SyncInterval string
	// Firewall: each node runs as a user of its own and is a party of it
	// named as the node, so that the test can cut it off.
	Firewall *Firewall
	// Disks: each node's data is on a file system of its own, so that
	// PowerOff can drop what the node had not synced.
	Disks bool
	// DiskCommit is how often, in seconds, the disks' file systems commit
	// their journals ("": ext4's default, 5).
	DiskCommit string
	// Links: every route between two nodes and every program's connection
	// (LinkedURL) crosses a Link, so that the test can delay them. The
	// nodes then tell neither each other nor their clients any other
	// address (cluster advertise, no_advertise).
	Links bool
}

// NATSProcesses starts a JetStream cluster of processes on loopback as c
// says, stopped when the test ends. It returns once a stream replicated
// on every node can be created.
func NATSProcesses(t testing.TB, c ProcCluster) []*NATSProc {
	t.Helper()
	n, syncInterval, fw := c.Nodes, c.SyncInterval, c.Firewall
	bin := natsServerBinary(t)
	auth, err := os.ReadFile(filepath.Join(moduleDir(t), "deploy", "nats", "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	ports, routes := make([]int, n), make([]string, n)
	clusterPorts, advertise := make([]int, n), make([]string, n)
	links := make([][2]*Link, n) // client, route
	for i := range n {
		ports[i], clusterPorts[i] = FreePort(t), FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i])
		if c.Links {
			links[i] = [2]*Link{NewLink(t, fmt.Sprintf("127.0.0.1:%d", ports[i])), NewLink(t, fmt.Sprintf("127.0.0.1:%d", clusterPorts[i]))}
			routes[i] = "nats-route://" + links[i][1].Addr()
			advertise[i] = fmt.Sprintf("advertise: %q, no_advertise: true, ", links[i][1].Addr())
		}
	}
	syncLine := ""
	if syncInterval != "" {
		syncLine = "sync_interval: " + syncInterval
	}
	nodes := make([]*NATSProc, n)
	for i := range n {
		p := &NATSProc{t: t, name: fmt.Sprintf("n%d", i+1), port: ports[i], monitor: FreePort(t), dir: t.TempDir(), bin: bin,
			clientLink: links[i][0], routeLink: links[i][1]}
		if fw != nil {
			p.uid, p.dir = fw.NewUID(), ownDir(t, "testenv-"+p.name+"-")
			own := []int{ports[i], clusterPorts[i]}
			for _, l := range p.Links() {
				own = append(own, l.Port())
			}
			fw.Add(p.name, p.uid, own...)
		}
		if c.Disks {
			p.disk = newDisk(t, p.dir, filepath.Join(p.dir, "data"), p.uid, c.DiskCommit)
		}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
jetstream { store_dir: %q
  %s }
cluster { name: events, listen: 127.0.0.1:%d, %sroutes: [%s] }
include auth.conf
`, p.name, p.port, p.monitor, filepath.Join(p.dir, "data"), syncLine, clusterPorts[i], advertise[i], strings.Join(routes, ", "))
		for name, b := range map[string][]byte{"nats.conf": []byte(conf), "auth.conf": auth} {
			if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if p.uid != 0 {
			chownAll(t, p.dir, p.uid)
		}
		nodes[i] = p
	}
	for _, p := range nodes {
		p.Start()
		t.Cleanup(func() {
			p.Stop()
			if dir := os.Getenv("STACK_LOGS"); dir != "" { // kept whole, as the programs' logs
				b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-nats-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), p.name)), b, 0o644)
			}
		})
	}
	for _, p := range nodes {
		p.waitListening()
	}
	waitReplicated(t, nodes[0].ClientURL(), n)
	return nodes
}

func moduleDir(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// election can go unanswered.
func waitReplicated(t testing.TB, url string, n int) {
	t.Helper()
	nc, err := nats.Connect(url, Operator())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	last := "no answer yet"
	WaitFor(t, "NATS cluster: a replicated stream", 60*time.Second, func() string { return last }, nil, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "testenv_probe", Subjects: []string{"testenv.probe"}, Replicas: n})
		if err == nil {
			err = js.DeleteStream(ctx, "testenv_probe")
		}
		if err != nil {
			last = err.Error()
			time.Sleep(100 * time.Millisecond)
		}
		return err == nil
	})
}
