package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// partitionRun says whether the partition and pause faults run: `make
// partition` (PARTITION=1) runs them; they need NATS as processes and take
// minutes.
func partitionRun(t *testing.T) {
	if os.Getenv("PARTITION") == "" {
		t.Skip("the partition and pause faults run in `make partition` (PARTITION=1)")
	}
}

// The node leading the events stream stalls (SIGSTOP: its sockets stay
// open, nothing answers, as in a long GC pause or a frozen VM) for 10 s.
func TestPartitionStreamLeaderPaused(t *testing.T) {
	natsFault(t, "nats-leader-paused", 10*time.Second, true, func(_ *testenv.Firewall, leader *testenv.NATSProc) func() {
		leader.Pause()
		return leader.Resume
	})
}

// The node leading the events stream is cut off from the other two, both
// ways, for 15 s: the programs connected to it (the minority side) still
// reach it, the others reach the majority.
func TestPartitionStreamLeaderCutOff(t *testing.T) {
	natsFault(t, "nats-leader-cut-off", 15*time.Second, true, func(fw *testenv.Firewall, leader *testenv.NATSProc) func() {
		fw.Isolate(leader.Name())
		return fw.Heal
	})
}

// The node leading the events stream hears the other two but cannot send
// to them, for 15 s (a one-way cut: its heartbeats are lost, theirs
// arrive).
func TestPartitionStreamLeaderCannotSend(t *testing.T) {
	natsFault(t, "nats-leader-cannot-send", 15*time.Second, true, func(fw *testenv.Firewall, leader *testenv.NATSProc) func() {
		for _, other := range []string{"n1", "n2", "n3"} {
			if other != leader.Name() {
				fw.Cut(leader.Name(), other)
			}
		}
		return fw.Heal
	})
}

// A fifth of the packets between every two NATS nodes are lost, each way,
// for 15 s. (Delay cannot be added: this kernel has no netem.)
func TestPartitionPacketLoss(t *testing.T) {
	natsFault(t, "nats-packet-loss-20", 15*time.Second, false, func(fw *testenv.Firewall, _ *testenv.NATSProc) func() {
		fw.Loss(20)
		return fw.Heal
	})
}

// natsFault runs the fleet, keyed and unkeyed, through two copies of every
// program on a 3-node cluster of NATS processes (each its own user, behind
// the test's firewall) with R3 streams; 5 s in, fault is done to the node
// leading the events stream for d, then the heal it returned, and 35 s of
// load follow (a recovery beyond 30 s shows). Nothing answered stored may
// be lost or stored twice; the share of requests answered stored during
// the fault and the time from the heal until the fleet's answers are
// stored again (>= 99.9% each second) are printed, and a recovery beyond
// 30 s fails. With election, the fault must make the other two nodes elect
// a new leader of the events stream while it lasts (proof that it was
// done).
func natsFault(t *testing.T, name string, d time.Duration, election bool, fault func(*testenv.Firewall, *testenv.NATSProc) (heal func())) {
	partitionRun(t)
	fw := testenv.NewFirewall(t)
	nodes := testenv.NATSProcesses(t, 3, "", fw)
	s, urls := natsProcessStack(t, nodes)
	var from, to time.Time
	var leader, successor string
	l := underLoad(t, s, 5*time.Second+d+35*time.Second, 5*time.Second, func() {
		leader = streamLeader(t, urls, bus.DefaultNames.EventsStream)
		for _, n := range nodes {
			if n.Name() == leader {
				t.Logf("%s: %s leads %s; the fault lasts %s", name, leader, bus.DefaultNames.EventsStream, d)
				for _, m := range nodes {
					t.Logf("%s: clients of %s: %v", name, m.Name(), m.Clients())
				}
				from = time.Now()
				heal := fault(fw, n)
				successor = electedBy(nodes, leader, from.Add(d))
				t.Logf("%s: the others name %q leader after %s", name, successor, time.Since(from).Round(100*time.Millisecond))
				time.Sleep(time.Until(from.Add(d)))
				heal()
				to = time.Now()
			}
		}
	})
	if to.IsZero() {
		t.Fatalf("no node named %s", leader)
	}
	if election && successor == "" {
		t.Fatalf("%s: the nodes other than %s elected no leader of %s within %s: was the fault done?", name, leader, bus.DefaultNames.EventsStream, d)
	}
	reconcile(t, s, name, l)
	during, recovered, secs := availability(l, from, to)
	fmt.Printf("partition fault=%s for=%s leader=%s successor=%s stored_during=%.3f recovered_after_s=%d\n", name, d, leader, successor, during, recovered)
	if recovered < 0 || recovered > 30 {
		t.Fatalf("the fleet's answers were not stored again (>= 99.9%% a second) within 30 s of the heal: %d s; each second after it (requests, stored): %v", recovered, secs)
	}
}

// electedBy asks the nodes other than old, until deadline, which node
// leads the events stream, and returns the first other than old that one
// of them names ("": none by the deadline).
func electedBy(nodes []*testenv.NATSProc, old string, deadline time.Time) string {
	for ; time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		for _, n := range nodes {
			if n.Name() == old {
				continue
			}
			if leader := askLeader(n.ClientURL(), bus.DefaultNames.EventsStream); leader != "" && leader != old {
				return leader
			}
		}
	}
	return ""
}

// askLeader is the leader of stream that the node at url names ("": no
// answer within a second).
func askLeader(url, stream string) string {
	nc, err := nats.Connect(url, testenv.Operator(), nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil || st.CachedInfo().Cluster == nil {
		return ""
	}
	return st.CachedInfo().Cluster.Leader
}

// natsProcessStack runs two copies of every program against nodes, with
// R3 streams, and provisions the chaos fleet.
func natsProcessStack(t *testing.T, nodes []*testenv.NATSProc) (*stack, string) {
	t.Helper()
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.ClientURL())
	}
	return twoCopiesStack(t, urls), strings.Join(urls, ",")
}

// twoCopiesStack runs two copies of every program against the NATS
// cluster at urls, with R3 streams, each copy ready, and provisions the
// chaos fleet.
func twoCopiesStack(t *testing.T, urls []string) *stack {
	t.Helper()
	s := newStack(t, testenv.ClickHouseAddr(t), strings.Join(urls, ","), append(chaosEnv, "NATS_REPLICAS=3")...)
	second := freeAddr(t)
	s.bases = append(s.bases, "http://"+second)
	for _, p := range []string{"writer-worker", "writer-worker.2", "mapper-worker", "mapper-worker.2", "ingest-api"} {
		s.start(p)
	}
	s.start("ingest-api.2", "HTTP_ADDR="+second)
	s.waitReady()
	// Every copy of every program is ready (a worker copy: it pulls from
	// its consumer), however slowly a busy machine starts them.
	for name, addr := range s.ops {
		s.waitOpsReady(t, name, addr)
	}
	provisionChaos(t, s)
	return s
}

// streamLeader names the node leading stream.
func streamLeader(t *testing.T, urls, stream string) string {
	t.Helper()
	js := testenv.OperatorJS(t, urls)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cl := st.CachedInfo().Cluster
	if cl == nil || cl.Leader == "" || len(cl.Replicas) != 2 {
		t.Fatalf("%s is not R3 with a leader: %+v", stream, cl)
	}
	return cl.Leader
}

// availability is the share of requests that ended from from to to
// answered stored, and how many whole seconds after to it took until every
// later whole second's requests were answered stored at >= 99.9% (-1:
// never, within the load), and each whole second's requests and stored
// answers after to.
func availability(l *load, from, to time.Time) (during float64, recovered int, secs [][2]int) {
	var n, ok int
	end := to
	for _, a := range l.answers {
		if !a.at.Before(from) && a.at.Before(to) {
			n++
			if a.ok {
				ok++
			}
		}
		if a.at.After(end) {
			end = a.at
		}
	}
	if n > 0 {
		during = float64(ok) / float64(n)
	}
	whole := int(end.Sub(to) / time.Second) // the last, partial second is left out
	secs = make([][2]int, whole)
	for _, a := range l.answers {
		if i := int(a.at.Sub(to) / time.Second); !a.at.Before(to) && i < whole {
			secs[i][0]++
			if a.ok {
				secs[i][1]++
			}
		}
	}
	recovered = -1
	for i := whole - 1; i >= 0; i-- {
		if secs[i][0] == 0 || float64(secs[i][1]) < 0.999*float64(secs[i][0]) {
			break
		}
		recovered = i
	}
	return during, recovered, secs
}
