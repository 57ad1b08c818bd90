package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
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
	natsFault(t, natsFaultCase{name: "nats-leader-paused", d: 10 * time.Second, election: true,
		fault: func(_ *testenv.Firewall, _ []*testenv.NATSProc, leader *testenv.NATSProc) func() {
			leader.Pause()
			return leader.Resume
		}})
}

// The node leading the events stream is cut off from the other two, both
// ways, for 15 s: the programs connected to it (the minority side) still
// reach it, the others reach the majority.
func TestPartitionStreamLeaderCutOff(t *testing.T) {
	natsFault(t, natsFaultCase{name: "nats-leader-cut-off", d: 15 * time.Second, election: true, firewall: true,
		fault: func(fw *testenv.Firewall, _ []*testenv.NATSProc, leader *testenv.NATSProc) func() {
			fw.Isolate(leader.Name())
			return healAndCount(t, fw)
		}})
}

// The node leading the events stream hears the other two but cannot send
// to them, for 15 s (a one-way cut: its heartbeats are lost, theirs
// arrive).
func TestPartitionStreamLeaderCannotSend(t *testing.T) {
	natsFault(t, natsFaultCase{name: "nats-leader-cannot-send", d: 15 * time.Second, election: true, firewall: true,
		fault: func(fw *testenv.Firewall, nodes []*testenv.NATSProc, leader *testenv.NATSProc) func() {
			for _, other := range nodes {
				if other != leader {
					fw.Cut(leader.Name(), other.Name())
				}
			}
			return healAndCount(t, fw)
		}})
}

// A fifth of the packets between every two NATS nodes are lost, each way,
// for 15 s (with delay, and between the programs and the nodes too:
// TestPartitionLossAndDelay).
func TestPartitionPacketLoss(t *testing.T) {
	natsFault(t, natsFaultCase{name: "nats-packet-loss-20", d: 15 * time.Second, firewall: true,
		fault: func(fw *testenv.Firewall, _ []*testenv.NATSProc, _ *testenv.NATSProc) func() {
			fw.Loss(20)
			return healAndCount(t, fw)
		}})
}

// Every route between two nodes and every program's connection to a node
// takes 200 ms more each way, for 15 s: a WAN's or a congested network's
// latency, as netem would add it (testenv.Link: this kernel has no netem).
func TestPartitionDelay(t *testing.T) {
	natsFault(t, natsFaultCase{name: "nats-delay-200ms", d: 15 * time.Second, links: true,
		fault: func(_ *testenv.Firewall, nodes []*testenv.NATSProc, _ *testenv.NATSProc) func() {
			setDelay(nodes, 200*time.Millisecond)
			return func() { healDelayAndCount(t, nodes) }
		}})
}

// A fifth of the packets between every two members of the cluster, the
// nodes and every program copy, are lost at random, each way, and what
// gets through takes 200 ms more each way, for 15 s.
func TestPartitionLossAndDelay(t *testing.T) {
	natsFault(t, natsFaultCase{name: "nats-loss-20-delay-200ms", d: 15 * time.Second, links: true, firewall: true, parties: programCopies,
		fault: func(fw *testenv.Firewall, nodes []*testenv.NATSProc, _ *testenv.NATSProc) func() {
			fw.Loss(20)
			setDelay(nodes, 200*time.Millisecond)
			healFirewall := healAndCount(t, fw)
			return func() {
				healFirewall()
				healDelayAndCount(t, nodes)
			}
		}})
}

// programCopies are the program copies of twoCopiesStack.
var programCopies = []string{"writer-worker", "writer-worker.2", "mapper-worker", "mapper-worker.2", "ingest-api", "ingest-api.2"}

// healDelayAndCount takes the links' delay away and fails the test if
// they delayed nothing.
func healDelayAndCount(t *testing.T, nodes []*testenv.NATSProc) {
	n := setDelay(nodes, 0)
	t.Logf("the links delayed %d chunks", n)
	if n == 0 {
		t.Errorf("the links delayed nothing: the fault was not done")
	}
}

// setDelay sets the one-way delay of every link of nodes and returns how
// many chunks they delayed so far.
func setDelay(nodes []*testenv.NATSProc, d time.Duration) (delayed int64) {
	for _, n := range nodes {
		for _, l := range n.Links() {
			l.SetDelay(d)
			delayed += l.Delayed()
		}
	}
	return delayed
}

// The second ingest-api copy is cut from every NATS node, both ways, for
// 15 s while it holds requests (the fleet posts to both copies in turn);
// its clients and the device port stay reachable.
func TestPartitionIngestCutFromNATS(t *testing.T) {
	natsFault(t, natsFaultCase{name: "ingest-api-cut-from-nats", d: 15 * time.Second, firewall: true, parties: []string{"ingest-api.2"},
		fault: func(fw *testenv.Firewall, nodes []*testenv.NATSProc, _ *testenv.NATSProc) func() {
			for _, n := range nodes {
				fw.Cut("ingest-api.2", n.Name())
				fw.Cut(n.Name(), "ingest-api.2")
			}
			return healAndCount(t, fw)
		}})
}

// Two of the three nodes, the one leading the events stream and the next,
// lose power at once, a minute into the load: their processes die, and
// what their disks held in memory only is gone (what the server did not
// fsync and the kernel had not yet written back: with ext4's defaults, the
// last half minute or so). They come back 10 s later on what their disks
// kept.
func TestPartitionTwoNodesLosePower(t *testing.T) {
	natsFault(t, losePower(t, "nats-two-nodes-lose-power", 60*time.Second, "", "", false))
}

// The same 5 s into the load, the disks committing every 2 minutes (the
// server's own default sync interval): the two nodes lose everything they
// stored, their state in the cluster included, and come back empty.
func TestPartitionTwoNodesLosePowerYoung(t *testing.T) {
	natsFault(t, losePower(t, "nats-two-nodes-lose-power-young", 5*time.Second, "", "120", false))
}

// The same as the first with every node syncing before each ack
// (sync_interval: always): nothing a node acknowledged is lost with its
// power.
func TestPartitionTwoNodesLosePowerSyncAlways(t *testing.T) {
	natsFault(t, losePower(t, "nats-two-nodes-lose-power-sync-always", 60*time.Second, "always", "", false))
}

// Every node loses power at once a minute into the load (a site's power
// cut), ext4's defaults: each keeps what it synced or the kernel wrote back.
// With the server's default sync, what the console wrote in the last
// minute before the cut may be lost (docs/guarantees.md): counted, not
// failed; anything older must be kept.
func TestPartitionAllNodesLosePower(t *testing.T) {
	c := losePower(t, "nats-all-nodes-lose-power", 60*time.Second, "", "", true)
	c.registryMayLose = time.Minute
	natsFault(t, c)
}

// The same with every node syncing before each ack.
func TestPartitionAllNodesLosePowerSyncAlways(t *testing.T) {
	natsFault(t, losePower(t, "nats-all-nodes-lose-power-sync-always", 60*time.Second, "always", "", true))
}

// losePower cuts the power of the node leading the events stream and the
// next (all: of every node) at `at` into the load, their disks committing
// every commit seconds ("": ext4's default), the nodes syncing as sync
// says ("": the server's default); they start again 10 s later.
func losePower(t *testing.T, name string, at time.Duration, sync, commit string, all bool) natsFaultCase {
	var nodes []*testenv.NATSProc
	var before map[string]uint64
	c := natsFaultCase{name: name, at: at, d: 10 * time.Second, disks: true, sync: sync, commit: commit, registry: true}
	c.fault = func(_ *testenv.Firewall, cluster []*testenv.NATSProc, leader *testenv.NATSProc) func() {
		nodes = cluster
		var two []*testenv.NATSProc
		for i, n := range nodes {
			if n == leader {
				two = []*testenv.NATSProc{n, nodes[(i+1)%len(nodes)]}
			}
		}
		if all {
			two = nodes
		}
		before = lastSeqs(nodes)
		testenv.PowerOff(two...)
		return func() {
			for _, n := range two {
				n.Start()
			}
		}
	}
	// What the cluster acknowledged and then lost shows as a stream
	// whose sequence went back.
	c.afterHeal = func() {
		after := lastSeqs(nodes)
		for _, st := range watchedStreams {
			t.Logf("%s: %s last sequence %d before the power loss, %d at the first answer after it (%d gone)",
				name, st, before[st], after[st], int64(before[st])-int64(after[st]))
		}
		logConsumers(t, name, nodes)
		time.AfterFunc(20*time.Second, func() { logConsumers(t, name+", 20 s later", nodes) })
	}
	return c
}

// healAndCount heals the firewall's faults and fails the test if they
// dropped nothing.
func healAndCount(t *testing.T, fw *testenv.Firewall) func() {
	return func() {
		n := fw.Heal()
		t.Logf("the firewall dropped %d packets", n)
		if n == 0 {
			t.Errorf("the firewall dropped nothing: the fault was not done")
		}
	}
}

// natsFaultCase is one fault done to a 3-node cluster of NATS processes.
type natsFaultCase struct {
	name string
	at   time.Duration // how far into the load it comes (0: 5 s)
	d    time.Duration // how long the fault lasts
	// election: the fault must make the other nodes elect a new leader of
	// the events stream while it lasts (proof that it was done).
	election bool
	firewall bool   // each node its own user behind the test's firewall
	disks    bool   // each node's data on a disk of its own
	commit   string // the disks' journal commit interval, s ("": ext4's default)
	sync     string // the nodes' sync_interval ("": the server's default)
	links    bool   // the routes and the programs' connections cross a testenv.Link
	// parties: these program copies ("ingest-api.2") run as users of their
	// own, parties of the firewall named as the copies.
	parties []string
	// registry: the console provisions devices during the load; every
	// write answered 200 must be in the registry after it.
	registry bool
	// registryMayLose: the registry writes of this long before the fault
	// may be lost with the settings of the case.
	registryMayLose time.Duration
	fault           func(fw *testenv.Firewall, nodes []*testenv.NATSProc, leader *testenv.NATSProc) (heal func())
	afterHeal       func() // if set, runs once healed, while the load goes on
}

// natsFault runs the fleet, keyed and unkeyed, through two copies of every
// program on a 3-node cluster of NATS processes with R3 streams; at its
// time into the load, the fault is done (given the node leading the events stream) for its
// duration, then the heal it returned, and 35 s of load follow (a recovery
// beyond 30 s shows). Nothing answered stored may be lost or stored twice;
// the share of requests answered stored during the fault and the time from
// the heal until the fleet's answers are stored again (>= 99.9% each
// second) are printed, and a recovery beyond 30 s fails.
func natsFault(t *testing.T, c natsFaultCase) {
	partitionRun(t)
	cluster := testenv.ProcCluster{Nodes: 3, SyncInterval: c.sync, Disks: c.disks, DiskCommit: c.commit, Links: c.links}
	if c.at == 0 {
		c.at = 5 * time.Second
	}
	if c.firewall {
		cluster.Firewall = testenv.NewFirewall(t)
	}
	nodes := testenv.NATSProcesses(t, cluster)
	users := map[string]int{}
	for _, name := range c.parties {
		users[name] = cluster.Firewall.NewUID()
		cluster.Firewall.Add(name, users[name])
	}
	s, urls := natsProcessStack(t, nodes, users)
	var from, to time.Time
	var leader, successor string
	var written <-chan []registryWrite
	if c.registry {
		ctx, stop := context.WithTimeout(context.Background(), c.at+c.d+35*time.Second)
		defer stop()
		written = registryWrites(ctx, s)
	}
	l := underLoad(t, s, c.at+c.d+35*time.Second, c.at, func() {
		leader = streamLeader(t, urls, bus.DefaultNames.EventsStream)
		for _, n := range nodes {
			if n.Name() == leader {
				t.Logf("%s: %s leads %s; the fault lasts %s", c.name, leader, bus.DefaultNames.EventsStream, c.d)
				for _, m := range nodes {
					t.Logf("%s: clients of %s: %v", c.name, m.Name(), m.Clients())
				}
				from = time.Now()
				heal := c.fault(cluster.Firewall, nodes, n)
				if c.election {
					successor = electedBy(nodes, leader, from.Add(c.d))
					t.Logf("%s: the others name %q leader after %s", c.name, successor, time.Since(from).Round(100*time.Millisecond))
				}
				time.Sleep(time.Until(from.Add(c.d)))
				heal()
				to = time.Now()
				if c.afterHeal != nil {
					c.afterHeal()
				}
			}
		}
	})
	if to.IsZero() {
		t.Fatalf("no node named %s", leader)
	}
	if c.election && successor == "" {
		t.Fatalf("%s: the nodes other than %s elected no leader of %s within %s: was the fault done?", c.name, leader, bus.DefaultNames.EventsStream, c.d)
	}
	reconcile(t, s, c.name, l)
	if written != nil {
		var since time.Time
		if c.registryMayLose > 0 {
			since = from.Add(-c.registryMayLose)
		}
		registryKept(t, s, c.name, <-written, since)
	}
	during, recovered, secs := availability(l, from, to)
	fmt.Printf("partition fault=%s for=%s leader=%s successor=%s stored_during=%.3f recovered_after_s=%d stored_p50_before_ms=%d stored_p50_during_ms=%d\n",
		c.name, c.d, leader, successor, during, recovered, storedMedian(l, time.Time{}, from).Milliseconds(), storedMedian(l, from, to).Milliseconds())
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

// watchedStreams are the streams whose last sequence the power loss
// compares: one that went back lost what it had acknowledged.
var watchedStreams = []string{bus.DefaultNames.EventsStream, bus.DefaultNames.MappedStream, bus.DefaultNames.ClaimsStream}

// lastSeqs is the last sequence of each stream, as the first node to
// answer (within 30 s) gives them.
func lastSeqs(nodes []*testenv.NATSProc) map[string]uint64 {
	seqs := map[string]uint64{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && len(seqs) < len(watchedStreams); time.Sleep(100 * time.Millisecond) {
		for _, n := range nodes {
			for _, st := range watchedStreams {
				if _, ok := seqs[st]; !ok {
					if info := askStream(n.ClientURL(), st); info != nil {
						seqs[st] = info.State.LastSeq
					}
				}
			}
		}
	}
	return seqs
}

// logConsumers logs, for each watched stream, its last sequence and where
// each of its consumers stands (a consumer past its stream's last
// sequence skips the messages stored until the stream catches up), as the
// first node to answer says.
func logConsumers(t *testing.T, name string, nodes []*testenv.NATSProc) {
	t.Helper()
	for _, n := range nodes {
		nc, err := nats.Connect(n.ClientURL(), testenv.Operator(), nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			continue
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, sn := range watchedStreams {
			st, err := js.Stream(ctx, sn)
			if err != nil {
				t.Logf("%s: %s: %v", name, sn, err)
				continue
			}
			list := st.ListConsumers(ctx)
			for info := range list.Info() {
				t.Logf("%s: %s last sequence %d: consumer %s delivered %d, ack floor %d, %d pending, %d waiting for ack",
					name, sn, st.CachedInfo().State.LastSeq, info.Name, info.Delivered.Stream, info.AckFloor.Stream, info.NumPending, info.NumAckPending)
			}
			if err := list.Err(); err != nil {
				t.Logf("%s: %s last sequence %d: consumers not listed: %v", name, sn, st.CachedInfo().State.LastSeq, err)
			}
		}
		cancel()
		nc.Close()
		return
	}
}

// askLeader is the leader of stream that the node at url names ("": no
// answer within a second).
func askLeader(url, stream string) string {
	if info := askStream(url, stream); info != nil && info.Cluster != nil {
		return info.Cluster.Leader
	}
	return ""
}

// askStream is what the node at url says of stream (nil: no answer within
// a second).
func askStream(url, stream string) *jetstream.StreamInfo {
	nc, err := nats.Connect(url, testenv.Operator(), nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	return st.CachedInfo()
}

// natsProcessStack runs two copies of every program against nodes (their
// links, if they have them), with R3 streams, and provisions the chaos
// fleet. It returns the nodes' own client addresses for the test's checks.
func natsProcessStack(t *testing.T, nodes []*testenv.NATSProc, users map[string]int) (*stack, string) {
	t.Helper()
	var linked, direct []string
	for _, n := range nodes {
		linked, direct = append(linked, n.LinkedURL()), append(direct, n.ClientURL())
	}
	return twoCopiesStack(t, linked, users), strings.Join(direct, ",")
}

// twoCopiesStack runs two copies of every program against the NATS
// cluster at urls, with R3 streams, each copy ready (users: the copies
// that run as a user of their own), and provisions the chaos fleet.
func twoCopiesStack(t *testing.T, urls []string, users map[string]int) *stack {
	t.Helper()
	s := newStack(t, testenv.ClickHouseAddr(t), strings.Join(urls, ","), append(chaosEnv, "NATS_REPLICAS=3")...)
	s.users = users
	second := freeAddr(t)
	s.bases = append(s.bases, "http://"+second)
	for _, p := range programCopies[:5] {
		s.start(p)
	}
	s.start(programCopies[5], "HTTP_ADDR="+second)
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

// storedMedian is the median time a request took among those answered
// stored that ended from from until to.
func storedMedian(l *load, from, to time.Time) time.Duration {
	var took []time.Duration
	for _, a := range l.answers {
		if a.ok && !a.at.Before(from) && a.at.Before(to) {
			took = append(took, a.took)
		}
	}
	if len(took) == 0 {
		return 0
	}
	slices.Sort(took)
	return took[len(took)/2]
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
