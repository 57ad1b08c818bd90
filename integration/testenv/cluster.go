package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// ClickHouseCluster is ZooKeeper and ClickHouse replicas of one shard on
// loopback, run by deploy/clickhouse/cluster.sh, stopped when the test ends.
type ClickHouseCluster struct {
	t      testing.TB
	dir    string
	script string   // deploy/clickhouse/cluster.sh
	Addrs  []string // native protocol address of each replica
	env    []string // the users ZooKeeper and the replicas run as, if parties of a firewall
	disks  []*disk  // each replica's data's own file system, if on disks
}

// ReplicatedClickHouse starts ZooKeeper and n replicas (Debian's zookeeper
// and clickhouse-server; `make test` installs both). Tests fail without
// them, never skip.
func ReplicatedClickHouse(t testing.TB, n int) *ClickHouseCluster {
	t.Helper()
	return startCluster(t, make([]int, n), nil, false)
}

// ReplicatedClickHouseBehind is ReplicatedClickHouse with ZooKeeper and
// each replica parties of fw, each running as a user of its own:
// "zookeeper", and "clickhouse.1", "clickhouse.2", ... (1-based, the order
// of Addrs).
func ReplicatedClickHouseBehind(t testing.TB, n int, fw *Firewall) *ClickHouseCluster {
	t.Helper()
	return startCluster(t, make([]int, n), fw, false)
}

// ReplicatedClickHouseOnDisks is ReplicatedClickHouseBehind with each
// replica's data on a file system of its own (ext4's defaults), so that a
// replica can lose power (PowerLoss).
func ReplicatedClickHouseOnDisks(t testing.TB, n int, fw *Firewall) *ClickHouseCluster {
	t.Helper()
	return startCluster(t, make([]int, n), fw, true)
}

// ShardedClickHouse starts ZooKeeper and n servers, each a shard of its own
// (one replica each), in the cluster "events".
func ShardedClickHouse(t testing.TB, n int) *ClickHouseCluster {
	t.Helper()
	shards := make([]int, n)
	for i := range shards {
		shards[i] = i
	}
	return startCluster(t, shards, nil, false)
}

// startCluster starts a server per entry of shards, in that shard
// (0-based), each a party of fw if given, each on a disk of its own if
// disks.
func startCluster(t testing.TB, shards []int, fw *Firewall, disks bool) *ClickHouseCluster {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	c := &ClickHouseCluster{t: t, script: filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "deploy", "clickhouse", "cluster.sh")}
	// A port found free may be taken by another test process before the
	// server binds it (go test runs packages at once): then start again on
	// fresh ports, in a fresh directory.
	for attempt := 1; ; attempt++ {
		c.dir, c.Addrs, c.env, c.disks = t.TempDir(), nil, nil, nil
		zk := FreePort(t)
		args := []string{"start", c.dir, fmt.Sprint(zk)}
		if fw != nil { // the users' processes must reach their directories
			c.dir = ownDir(t, "cluster")
			args[1] = c.dir
			if err := os.Chmod(c.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			uid := fw.NewUID()
			fw.Add("zookeeper", uid, zk)
			c.env = append(c.env, fmt.Sprintf("RUN_AS_ZK=%d", uid))
		}
		for i, shard := range shards {
			tcp, http, inter := FreePort(t), FreePort(t), FreePort(t)
			args = append(args, fmt.Sprintf("%d,%d,%d,%d", tcp, http, inter, shard+1))
			c.Addrs = append(c.Addrs, fmt.Sprintf("127.0.0.1:%d", tcp))
			uid := 0
			if fw != nil {
				uid = fw.NewUID()
				fw.Add(fmt.Sprintf("clickhouse.%d", i+1), uid, tcp, http, inter)
				c.env = append(c.env, fmt.Sprintf("RUN_AS_R%d=%d", i+1, uid))
			}
			if disks {
				c.disks = append(c.disks, newDisk(t, t.TempDir(), filepath.Join(c.dir, fmt.Sprintf("r%d", i+1), "data"), uid, ""))
			}
		}
		dir := c.dir
		t.Cleanup(func() { _ = c.run("stop", dir) })
		err := c.run(args...)
		if err == nil {
			return c
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			t.Fatalf("start replicated ClickHouse: %v", err)
		}
		_ = c.run("stop", dir)
	}
}

func (c *ClickHouseCluster) run(args ...string) error {
	cmd := exec.Command(c.script, args...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster.sh %s: %v\n%s", args[0], err, out)
	}
	return nil
}

// StopReplica stops replica i (0-based); StartReplica starts it again on its
// ports and data.
func (c *ClickHouseCluster) StopReplica(i int) {
	c.t.Helper()
	if err := c.run("replica-stop", c.dir, fmt.Sprint(i+1)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *ClickHouseCluster) StartReplica(i int) {
	c.t.Helper()
	if err := c.run("replica-start", c.dir, fmt.Sprint(i+1)); err != nil {
		c.t.Fatal(err)
	}
}

// StopZooKeeper and StartZooKeeper stop and start the coordination service.
func (c *ClickHouseCluster) StopZooKeeper() {
	c.t.Helper()
	if err := c.run("zk-stop", c.dir); err != nil {
		c.t.Fatal(err)
	}
}

func (c *ClickHouseCluster) StartZooKeeper() {
	c.t.Helper()
	if err := c.run("zk-start", c.dir); err != nil {
		c.t.Fatal(err)
	}
}

// Count runs a count query on replica i alone.
func (c *ClickHouseCluster) Count(i int, q string, args ...any) (uint64, error) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{c.Addrs[i]}, DialTimeout: 2 * time.Second})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n uint64
	err = conn.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// Exec runs a statement on the server at addr (one of Addrs) alone.
func (c *ClickHouseCluster) Exec(addr, q string) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return conn.Exec(ctx, q)
}

// Fetches stops or starts (verb "STOP", "START") the fetches of table on
// every replica but the first: an insert through the first then waits for
// its quorum until they start again.
func (c *ClickHouseCluster) Fetches(verb, table string) {
	c.t.Helper()
	for _, addr := range c.Addrs[1:] {
		if err := c.Exec(addr, "SYSTEM "+verb+" FETCHES "+table); err != nil {
			c.t.Fatal(err)
		}
	}
}

// KillReplica SIGKILLs replica i (0-based), as a crash would.
func (c *ClickHouseCluster) KillReplica(i int) {
	c.t.Helper()
	pidFile := filepath.Join(c.dir, fmt.Sprintf("r%d", i+1), "pid")
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		c.t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(raw), &pid); err != nil {
		c.t.Fatal(err)
	}
	p, err := os.FindProcess(pid)
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	for range 100 { // gone, so that its ports are free for the restart
		if p.Signal(syscall.Signal(0)) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = os.Remove(pidFile)
}

// PowerLoss kills replica i (0-based) and drops what its file system held
// in memory only, as when its machine loses power
// (ReplicatedClickHouseOnDisks); StartReplica brings it back on what is
// left.
func (c *ClickHouseCluster) PowerLoss(i int) {
	c.t.Helper()
	if i >= len(c.disks) {
		c.t.Fatalf("replica %d has no disk of its own to lose power on", i+1)
	}
	c.KillReplica(i)
	c.disks[i].powerLoss()
}

// LogLines returns up to max lines of replica i's (0-based) server log that
// contain any of subs, for a test that explains what went wrong.
func (c *ClickHouseCluster) LogLines(i, max int, subs ...string) []string {
	raw, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("r%d", i+1), "log", "server.log"))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
		if len(out) == max {
			break
		}
	}
	return out
}

// PauseZooKeeper stops ZooKeeper's process (SIGSTOP) as a long GC pause
// or a stalled machine would: connections stay open, requests wait.
// ResumeZooKeeper lets it go on (SIGCONT).
func (c *ClickHouseCluster) PauseZooKeeper()  { c.signalZooKeeper(syscall.SIGSTOP) }
func (c *ClickHouseCluster) ResumeZooKeeper() { c.signalZooKeeper(syscall.SIGCONT) }

func (c *ClickHouseCluster) signalZooKeeper(sig syscall.Signal) {
	c.t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.dir, "zk", "pid"))
	if err != nil {
		c.t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(raw), &pid); err != nil {
		c.t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		c.t.Fatal(err)
	}
}
