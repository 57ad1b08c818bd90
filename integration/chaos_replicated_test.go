package integration

import (
	"context"
	"strconv"
	"strings"
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
	env := append([]string{"CLICKHOUSE_ADDR=" + strings.Join(cl.Addrs, ","), "CLICKHOUSE_REPLICATED=true", "CLICKHOUSE_INSERT_QUORUM=2"}, chaosEnv...)
	s := startStackOn(t, cl.Addrs[1], env...)
	provisionChaos(t, s)
	return s, cl
}

// caughtUp waits until replica i holds every value the reconciled replica
// does, each once.
func caughtUp(t *testing.T, s *stack, cl *testenv.ClickHouseCluster, i int) {
	t.Helper()
	want := storedValues(t, s)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{cl.Addrs[i]}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got map[int]uint64
	eventually(t, 60*time.Second, func() bool {
		got = map[int]uint64{}
		rows, err := conn.Query(context.Background(), "SELECT value_json, count() FROM "+s.db+".input_values WHERE entity = 'chaos' GROUP BY value_json")
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var v string
			var n uint64
			if rows.Scan(&v, &n) == nil {
				k, _ := strconv.Atoi(v)
				got[k] = n
			}
		}
		return len(got) >= len(want)
	})
	for v, n := range want {
		if got[v] != n {
			t.Fatalf("replica %d: value %d stored %d times, replica 2 %d", i+1, v, got[v], n)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("replica %d holds %d values, replica 2 %d", i+1, len(got), len(want))
	}
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
	caughtUp(t, s, cl, 0)
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
		r := s.post(t, `{"serial":"chaos-0","data":{"v":-1}}`, keyHeader("chaos-tok-0", "after-zookeeper"))
		if r.Status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered 30 s after ZooKeeper came back: %d %s", r.Status, r.Raw)
		}
		time.Sleep(250 * time.Millisecond)
	}
	reconcile(t, s, "zookeeper-stop", l)
	caughtUp(t, s, cl, 0)
	caughtUp(t, s, cl, 2)
}
