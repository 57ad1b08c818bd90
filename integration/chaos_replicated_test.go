package integration

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/devicehub/eventservice/integration/testenv"
)

// The replicated storage faults: the same load and reconciliation as the
// other chaos tests, against three ClickHouse replicas with a quorum of 2.
// The writer is given replica 1 first; the reconciliation reads replica 2,
// which stays up, then checks that replica 1 caught up to the same rows.
// `make test` runs them short, `make chaos` at full length.

func replicatedChaosStack(t *testing.T) (*stack, *testenv.ClickHouseCluster) {
	t.Helper()
	cl := testenv.ReplicatedClickHouse(t, 3)
	env := append([]string{"CLICKHOUSE_URL=" + chURL(dbPlaceholder, cl.Addrs...), "CLICKHOUSE_REPLICATED=true"}, chaosEnv...)
	s := startStackOn(t, cl.Addrs[1], env...)
	provisionChaos(t, s)
	t.Cleanup(func() {
		if t.Failed() {
			explainCopies(t, s, cl)
		}
	})
	return s, cl
}

// explainCopies logs, on each replica, the rows of every value stored more
// than once: the parts that hold them and the events they came from.
func explainCopies(t *testing.T, s *stack, cl *testenv.ClickHouseCluster) {
	t.Helper()
	var parts []string
	for i, addr := range cl.Addrs {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
		if err != nil {
			t.Logf("replica %d: %v", i, err)
			continue
		}
		rows, err := conn.Query(context.Background(), "SELECT value_json, _part, event_id, received_ns, serial FROM "+s.db+
			".input_values WHERE entity = 'chaos' AND value_json IN (SELECT value_json FROM "+s.db+
			".input_values WHERE entity = 'chaos' GROUP BY value_json HAVING count() > 1) ORDER BY value_json, _part")
		if err != nil {
			t.Logf("replica %d: %v", i, err)
			_ = conn.Close()
			continue
		}
		for rows.Next() {
			var v, part, id, serial string
			var rec int64
			if err := rows.Scan(&v, &part, &id, &rec, &serial); err != nil {
				t.Logf("replica %d: %v", i, err)
				break
			}
			t.Logf("replica %d: value %s part %s event %s received %d serial %s", i, v, part, id, rec, serial)
			parts = append(parts, part)
		}
		_ = rows.Close()
		_ = conn.Close()
	}
	if len(parts) == 0 {
		return
	}
	for i := range cl.Addrs {
		for _, line := range cl.LogLines(i, 60, append(parts, "Code: 210", "Code: 319", "Code: 286", "quorum", "Quorum")...) {
			t.Logf("replica %d log: %s", i, line)
		}
	}
}

// converged waits until every replica holds the same values (a replica
// that was down catches up; a part a killed replica wrote before its
// quorum failed, answered 503, reaches the others once it is back), then
// checks that none holds a value twice and every success is there.
func converged(t *testing.T, s *stack, cl *testenv.ClickHouseCluster, l *load) {
	t.Helper()
	read := func(addr string) map[int]uint64 {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
		if err != nil {
			return nil
		}
		defer conn.Close()
		out, err := valuesOn(conn, s.db, "chaos")
		if err != nil {
			return nil
		}
		return out
	}
	same := func(a, b map[int]uint64) bool {
		if a == nil || b == nil || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if b[k] != v {
				return false
			}
		}
		return true
	}
	var sets []map[int]uint64
	eventually(t, 60*time.Second, func() bool {
		sets = sets[:0]
		for _, a := range cl.Addrs {
			sets = append(sets, read(a))
		}
		for _, m := range sets[1:] {
			if !same(sets[0], m) {
				return false
			}
		}
		return true
	})
	for v, n := range sets[0] {
		if n > 1 {
			t.Fatalf("value %d stored %d times on every replica", v, n)
		}
	}
	for v := range l.succeeded {
		if sets[0][v] != 1 {
			t.Fatalf("value %d answered stored is missing after the replicas converged", v)
		}
	}
	t.Logf("replicas converged: %d values on each", len(sets[0]))
}

func TestChaosClickHouseReplicaKilled(t *testing.T) {
	s, cl := replicatedChaosStack(t)
	total, at := chaosDuration()
	l := underLoad(t, s, total, at, func() {
		cl.KillReplica(0)
		time.Sleep(total / 4)
		cl.StartReplica(0)
	})
	reconcile(t, s, "clickhouse-replica-kill", l)
	converged(t, s, cl, l)
}

func TestChaosZooKeeperStopped(t *testing.T) {
	s, cl := replicatedChaosStack(t)
	total, at, down := 8*time.Second, 1500*time.Millisecond, 3*time.Second
	if chaosFull() {
		total, at, down = 25*time.Second, 5*time.Second, 10*time.Second
	}
	l := underLoad(t, s, total, at, func() {
		cl.StopZooKeeper()
		time.Sleep(down)
		cl.StartZooKeeper()
	})
	if l.statuses["503"] == 0 {
		t.Errorf("no 503 while ZooKeeper was down: %v", l.statuses)
	}
	// Recovered by itself: a new reading is stored without any restart.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.post(t, `{"serial":"chaos-0","data":{"v":-1}}`, keyHeader("chaos-tok-5f0c2b9e71d4-0", "after-zookeeper"))
		if r.Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered 30 s after ZooKeeper came back: %d %s", r.Status, r.Raw)
		}
		time.Sleep(250 * time.Millisecond)
	}
	reconcile(t, s, "zookeeper-stop", l)
	converged(t, s, cl, l)
}

// ZooKeeper paused shorter than the replicas' session (6 s): inserts that
// were waiting on it go on once it resumes, after the writer gave up on
// them (INSERT_TIMEOUT 1 s), while their events are retried.
func TestChaosZooKeeperPaused(t *testing.T) {
	s, cl := replicatedChaosStack(t)
	total, at, pauses := 10*time.Second, 1500*time.Millisecond, 2
	if chaosFull() {
		total, at, pauses = 25*time.Second, 3*time.Second, 5
	}
	l := underLoad(t, s, total, at, func() {
		for range pauses {
			cl.PauseZooKeeper()
			time.Sleep(2500 * time.Millisecond)
			cl.ResumeZooKeeper()
			time.Sleep(1500 * time.Millisecond)
		}
	})
	reconcile(t, s, "zookeeper-pause", l)
	converged(t, s, cl, l)
}
