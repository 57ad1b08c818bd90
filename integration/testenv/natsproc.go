package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
	bin     string
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
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
	clusterPorts := make([]int, n)
	for i := range n {
		ports[i], clusterPorts[i] = FreePort(t), FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i])
	}
	syncLine := ""
	if syncInterval != "" {
		syncLine = "sync_interval: " + syncInterval
	}
	nodes := make([]*NATSProc, n)
	for i := range n {
		p := &NATSProc{t: t, name: fmt.Sprintf("n%d", i+1), port: ports[i], monitor: FreePort(t), dir: t.TempDir(), bin: bin}
		if fw != nil {
			p.uid, p.dir = fw.NewUID(), ownDir(t, "testenv-"+p.name+"-")
			fw.Add(p.name, p.uid, ports[i], clusterPorts[i])
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
cluster { name: events, listen: 127.0.0.1:%d, routes: [%s] }
include auth.conf
`, p.name, p.port, p.monitor, filepath.Join(p.dir, "data"), syncLine, clusterPorts[i], strings.Join(routes, ", "))
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
		t.Cleanup(p.Stop)
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

// Start starts the node's process (again, on its data).
func (p *NATSProc) Start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, "-c", filepath.Join(p.dir, "nats.conf"))
	cmd.Env = append(os.Environ(), "NATS_INGEST_PASSWORD="+NATSPassword("ingest-api"), "NATS_MAPPER_PASSWORD="+NATSPassword("mapper-worker"),
		"NATS_WRITER_PASSWORD="+NATSPassword("writer-worker"), "NATS_OPERATOR_PASSWORD="+NATSPassword("operator"))
	log, err := os.OpenFile(filepath.Join(p.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	// A node outlives no test run, paused or not.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid)}
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd, p.exited, p.stopped = cmd, make(chan struct{}), false
	go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
}

// waitListening waits until the node takes connections.
func (p *NATSProc) waitListening() {
	p.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
			p.t.Fatalf("nats node %s exited: %s", p.name, b)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("nats node %s not listening: %v", p.name, err)
		}
	}
}

// Name is the node's server name (as stream info names leaders).
func (p *NATSProc) Name() string { return p.name }

// ClientURL is the node's client address.
func (p *NATSProc) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// Clients names the client connections the node holds now, by the names
// the programs gave them (nil: the node did not answer within a second).
func (p *NATSProc) Clients() []string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=1024", p.monitor))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var connz struct {
		Connections []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&connz) != nil {
		return nil
	}
	names := []string{}
	for _, c := range connz.Connections {
		names = append(names, c.Name)
	}
	return names
}

// Pause stops the process where it is (SIGSTOP): its sockets stay open and
// nothing answers, as in a long stall.
func (p *NATSProc) Pause() { p.signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *NATSProc) Resume() { p.signal(syscall.SIGCONT) }

func (p *NATSProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("nats node %s: %v", p.name, err)
	}
}

// Stop ends the process (resumed first, then SIGTERM; SIGKILL after 10 s).
func (p *NATSProc) Stop() {
	if p.cmd == nil || p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReplicated waits until an n-replica stream can be created through
// url: a meta leader alone is not enough, the first requests after the
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
