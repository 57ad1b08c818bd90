package integration

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// Two shards of one replica each (ZooKeeper and two ClickHouse 18.16
// servers on loopback), the writer given both with CLICKHOUSE_CLUSTER:
// replicated local tables, Distributed tables in front sharded by entity,
// synchronous inserts. Each entity's values live on one shard, both shards
// hold some, every reading is stored once (a keyed retry included), and
// the workspace reads see them all through the Distributed tables.
func TestShardedStorage(t *testing.T) {
	cl := testenv.ShardedClickHouse(t, 2)
	s := startStackOn(t, cl.Addrs[0], "CLICKHOUSE_URL="+chURL(dbPlaceholder, cl.Addrs...), "CLICKHOUSE_REPLICATED=true", "CLICKHOUSE_CLUSTER=events",
		"RETENTION=readings=30d")
	var inputs, data []string
	const entities, readings = 6, 15
	for e := range entities {
		inputs = append(inputs, fmt.Sprintf(`{"name":"v%d","entity":"sh-%d","entityInput":"v"}`, e, e))
	}
	s.admin(t, "PUT", "/devices/sh-dev", `{"accessToken":"tok-5f0c2b9e71d4-S","inputs":[`+strings.Join(inputs, ",")+`]}`)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	body := func(n int) string {
		data = data[:0]
		for e := range entities {
			data = append(data, fmt.Sprintf(`"v%d":%d`, e, n))
		}
		return fmt.Sprintf(`{"serial":"sh-dev","ts":%d,"data":{%s}}`, base.Add(time.Duration(n)*time.Second).UnixMilli(), strings.Join(data, ","))
	}
	for n := range readings {
		expect(t, s.post(t, body(n), keyHeader("tok-5f0c2b9e71d4-S", fmt.Sprint("sh-", n))), 200, storedMsg, "")
	}
	// A retry of reading 0 with its key: the first attempt's answer, nothing more stored.
	expect(t, s.post(t, body(0), keyHeader("tok-5f0c2b9e71d4-S", "sh-0")), 200, storedMsg, "")

	perShard := make([]uint64, len(cl.Addrs))
	for i := range cl.Addrs {
		n, err := cl.Count(i, "SELECT count() FROM "+s.db+".input_values_local")
		if err != nil {
			t.Fatal(err)
		}
		perShard[i] = n
		// An entity's values are all on one shard.
		split, err := cl.Count(i, "SELECT count() FROM (SELECT entity, count() AS c FROM "+s.db+".input_values_local GROUP BY entity HAVING c != ?)", uint64(readings))
		if err != nil || split != 0 {
			t.Fatalf("shard %d: %d entities with other than %d values (%v)", i+1, split, readings, err)
		}
	}
	if perShard[0] == 0 || perShard[1] == 0 || perShard[0]+perShard[1] != entities*readings {
		t.Fatalf("values per shard %v, want both used and %d in all", perShard, entities*readings)
	}
	total, err := cl.Count(1, "SELECT count() FROM "+s.db+".input_values")
	if err != nil || total != entities*readings {
		t.Fatalf("through the Distributed table on shard 2: %d (%v), want %d", total, err, entities*readings)
	}
	for e := range entities {
		latest := s.admin(t, "GET", fmt.Sprintf("/entities/sh-%d/inputs/v/latest", e), "")
		if fmt.Sprint(latest.Body["value"]) != fmt.Sprint(readings-1) {
			t.Fatalf("latest of sh-%d: %s", e, latest.Raw)
		}
	}
	q := url.Values{"from": {apiTime(base.Add(-time.Minute))}, "to": {apiTime(base.Add(time.Minute))}, "step": {"1h"}}
	if r := s.admin(t, "GET", "/entities/sh-3/inputs/v/series?"+q.Encode(), ""); !strings.Contains(string(r.Raw), fmt.Sprintf(`"count":%d,"min":0,"max":%d`, readings, readings-1)) {
		t.Fatalf("aggregated series through the Distributed table: %s", r.Raw)
	}
	eventually(t, 10*time.Second, func() bool {
		m := s.admin(t, "GET", "/devices/sh-dev/messages?limit=100", "")
		msgs, _ := m.Body["messages"].([]any)
		return len(msgs) == readings
	})
	t.Logf("values per shard: %v", perShard)

	// Diagnostics and the fleet view read the Distributed tables: the 16
	// stored answers (the keyed retry too) and one wrong token.
	if r := s.post(t, body(1), bearer("tok-5f0c2b9e71d4-wrong")); r.Status != 401 {
		t.Fatalf("a wrong token: %d %s", r.Status, r.Raw)
	}
	eventually(t, 45*time.Second, func() bool {
		r := s.admin(t, "GET", "/devices/sh-dev/diagnostics?range=1h", "")
		return strings.Contains(string(r.Raw), `{"kind":"invalid_token","requests":1,"readings":1},{"kind":"stored","requests":16,"readings":16}`)
	})
	if r := s.admin(t, "GET", "/fleet?range=1h", ""); r.Status != 200 || !strings.Contains(string(r.Raw), `"mostRejected":[{"serial":"sh-dev","lastSeen":`) {
		t.Fatalf("fleet view on sharded storage: %d %s", r.Status, r.Raw)
	}

	// The rollups behind Distributed tables: every reading is in the hour
	// rollup of its entity's shard, once.
	eventually(t, 100*time.Second, func() bool {
		return sumOf(t, s, "SELECT sum(n) FROM (SELECT entity, bucket, argMax(readings, version) AS n FROM "+s.db+".input_hours GROUP BY entity, bucket)") == entities*readings
	})
	if n, err := cl.Count(0, "SELECT count() FROM "+s.db+".input_minutes_local"); err != nil || n == 0 {
		t.Fatalf("shard 1 holds %d minute rollups (%v), want some", n, err)
	}

	// Retention behind Distributed tables: readings 75 days old (ingest-api
	// accepts 90) land in an old month of each shard's local table; the
	// writer, started again, sweeps every server and drops that month on
	// each shard, keeping the recent readings.
	old := time.Now().UTC().Add(-75 * 24 * time.Hour)
	for n := range 3 {
		expect(t, s.post(t, strings.Replace(body(n), fmt.Sprintf(`"ts":%d`, base.Add(time.Duration(n)*time.Second).UnixMilli()),
			fmt.Sprintf(`"ts":%d`, old.Add(time.Duration(n)*time.Second).UnixMilli()), 1), bearer("tok-5f0c2b9e71d4-S")), 200, storedMsg, "")
	}
	oldOn := func(i int) uint64 {
		n, err := cl.Count(i, "SELECT count() FROM "+s.db+".input_values_local WHERE ts_ns < ?", time.Now().Add(-30*24*time.Hour).UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := oldOn(0), oldOn(1); a == 0 || b == 0 || a+b != entities*3 {
		t.Fatalf("old readings per shard %d and %d, want both used and %d in all", a, b, entities*3)
	}
	s.kill(t, "writer-worker", os.Interrupt)
	s.start("writer-worker")
	eventually(t, 20*time.Second, func() bool { return oldOn(0)+oldOn(1) == 0 })
	if n := s.count(t, "input_values"); n != entities*readings {
		t.Fatalf("after the sweep %d readings, want the %d recent ones", n, entities*readings)
	}
	// One partition on each shard, counted just after it is dropped.
	eventually(t, 5*time.Second, func() bool {
		return s.scrape(t, "writer-worker")[`writer_worker_retention_dropped_partitions_total{table="input_values"}`] == 2
	})
}
