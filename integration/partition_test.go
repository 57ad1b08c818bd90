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
// open, nothing answers, as in a long GC pause or a frozen VM) for 10 s
// while the fleet posts, keyed and unkeyed, through two copies of every
// program on a 3-node cluster of NATS processes with R3 streams. Nothing
// answered stored is lost or stored twice; the share of requests answered
// stored during the stall and the time from its end until the fleet's
// answers are stored again (>= 99.9% each second) are logged.
func TestPartitionStreamLeaderPaused(t *testing.T) {
	partitionRun(t)
	nodes := testenv.NATSProcesses(t, 3, "")
	s, urls := natsProcessStack(t, nodes)
	const stall = 10 * time.Second
	var from, to time.Time
	var leader string
	// 35 s of load after the stall: a recovery beyond 30 s shows.
	l := underLoad(t, s, 50*time.Second, 5*time.Second, func() {
		leader = streamLeader(t, urls, bus.DefaultNames.EventsStream)
		for _, n := range nodes {
			if n.Name() == leader {
				t.Logf("pausing %s, leader of %s, for %s", leader, bus.DefaultNames.EventsStream, stall)
				from = time.Now()
				n.Pause()
				time.Sleep(stall)
				n.Resume()
				to = time.Now()
			}
		}
	})
	if to.IsZero() {
		t.Fatalf("no node named %s", leader)
	}
	reconcile(t, s, "nats-leader-paused", l)
	during, recovered, secs := availability(l, from, to)
	fmt.Printf("partition fault=nats-leader-paused stall=%s stored_during=%.3f recovered_after_s=%d\n", stall, during, recovered)
	if recovered < 0 || recovered > 30 {
		t.Fatalf("the fleet's answers were not stored again (>= 99.9%% a second) within 30 s of the stall's end: %d s; each second after it (requests, stored): %v", recovered, secs)
	}
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
