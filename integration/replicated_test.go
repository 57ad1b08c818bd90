package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// Replicated storage on one machine: ZooKeeper and three ClickHouse 18.16
// replicas of one shard, the writer given all three (its default quorum: 2).
// Every success is on a quorum when it is answered and on every replica
// soon after; the replica the writer uses is stopped under load and the
// writer moves on, then the replica catches up; ZooKeeper stopped refuses
// inserts with 503 and nothing reported stored that is not, and ingestion
// recovers by itself. Every reading is stored exactly once on every replica.
func TestReplicatedStorage(t *testing.T) {
	cl := testenv.ReplicatedClickHouse(t, 3)
	// The default quorum with three replicas: 2.
	s := startStackOn(t, cl.Addrs[0], "CLICKHOUSE_URL="+chURL(dbPlaceholder, cl.Addrs...), "CLICKHOUSE_REPLICATED=true",
		"OUTCOME_TIMEOUT=2s", "RETRY_MAX_DELAY=1s", "INSERT_TIMEOUT=2s")
	s.admin(t, "PUT", "/devices/rep-1", `{"accessToken":"tok-5f0c2b9e71d4-R","inputs":[{"name":"v","entity":"rep","entityInput":"v"}]}`)

	sent := 0
	// post sends reading n with its own Idempotency-Key, as the field
	// clients do, retrying 503s until it is stored (bounded).
	post := func(n int, within time.Duration) (refused int) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			r := s.post(t, fmt.Sprintf(`{"serial":"rep-1","data":{"v":%d}}`, n), keyHeader("tok-5f0c2b9e71d4-R", fmt.Sprint("rep-", n)))
			if r.Status == 200 {
				expect(t, r, 200, storedMsg, "")
				return refused
			}
			if r.Status != 503 || r.Header.Get("Retry-After") == "" || time.Now().After(deadline) {
				t.Fatalf("reading %d: %d %s (Retry-After %q)", n, r.Status, r.Raw, r.Header.Get("Retry-After"))
			}
			refused++
			time.Sleep(200 * time.Millisecond)
		}
	}
	rows := func(i int) (n, distinct uint64) {
		var err error
		if n, err = cl.Count(i, "SELECT count() FROM "+s.db+".input_values WHERE entity = 'rep'"); err == nil {
			distinct, err = cl.Count(i, "SELECT uniqExact(event_id) FROM "+s.db+".input_values WHERE entity = 'rep'")
		}
		if err != nil {
			return 0, 0
		}
		return n, distinct
	}
	// onEvery waits until every replica in which holds exactly want rows,
	// one per reading.
	onEvery := func(want uint64, which ...int) {
		t.Helper()
		for _, i := range which {
			var n, d uint64
			eventually(t, 30*time.Second, func() bool { n, d = rows(i); return n >= want })
			if n, d = rows(i); n != want || d != want {
				t.Fatalf("replica %d holds %d rows of %d readings, want %d once each", i+1, n, d, want)
			}
		}
	}

	// All replicas up: stored on a quorum when answered, then everywhere.
	for ; sent < 30; sent++ {
		post(sent, 5*time.Second)
	}
	onEvery(uint64(sent), 0, 1, 2)

	// The replica the writer uses is stopped: ingestion goes on through
	// the others (a quorum of 2 of the 2 left).
	cl.StopReplica(0)
	refused := 0
	for ; sent < 60; sent++ {
		refused += post(sent, 20*time.Second)
	}
	t.Logf("replica 1 stopped: %d attempts refused while the writer moved on", refused)
	onEvery(uint64(sent), 1, 2)
	if got := s.admin(t, "GET", "/entities/rep/inputs/v/latest", ""); fmt.Sprint(got.Body["value"]) != fmt.Sprint(sent-1) {
		t.Fatalf("latest through a replica: %s, want %d", got.Raw, sent-1)
	}
	cl.StartReplica(0)
	onEvery(uint64(sent), 0) // it catches up by itself

	// ZooKeeper stopped: inserts are refused, 503 + Retry-After, and what
	// is refused is not stored twice once it is back.
	cl.StopZooKeeper()
	for i := 0; i < 3; i++ {
		r := s.post(t, fmt.Sprintf(`{"serial":"rep-1","data":{"v":%d}}`, sent+i), keyHeader("tok-5f0c2b9e71d4-R", fmt.Sprint("rep-", sent+i)))
		if r.Status != 503 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("with ZooKeeper down: %d %s", r.Status, r.Raw)
		}
		if r.Body["message"] != "Message processed but failed to store data" && r.Body["message"] != "Failed to process message" {
			t.Fatalf("with ZooKeeper down: %s", r.Raw)
		}
	}
	time.Sleep(2 * time.Second)
	cl.StartZooKeeper()
	// The refused readings, retried with their keys, and new ones go in
	// once it is back, without a restart.
	for ; sent < 70; sent++ {
		post(sent, 60*time.Second)
	}
	onEvery(uint64(sent), 0, 1, 2)

	// The quorum is enforced: with one replica left, a success would rest
	// on a single copy, so the insert is refused instead.
	cl.StopReplica(0)
	cl.StopReplica(1)
	r := s.post(t, fmt.Sprintf(`{"serial":"rep-1","data":{"v":%d}}`, sent), keyHeader("tok-5f0c2b9e71d4-R", fmt.Sprint("rep-", sent)))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("with one replica of three: %d %s, want 503: a quorum of 2 cannot be met", r.Status, r.Raw)
	}
	cl.StartReplica(0)
	cl.StartReplica(1)
	post(sent, 60*time.Second)
	sent++
	onEvery(uint64(sent), 0, 1, 2)
}
