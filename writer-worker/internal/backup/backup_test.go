package backup

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
)

// BenchmarkRestore backs up and restores 10 M readings (input_values rows as
// the writer stores them, 1,000 devices): the tables' part of a backup and
// of a restore, which the streams' (registry, keys, audit: thousands of
// messages) add little to. Target: the restore within 5 minutes.
func BenchmarkRestore(b *testing.B) {
	if os.Getenv("CLICKHOUSE_TEST_ADDR") == "" {
		b.Skip("needs CLICKHOUSE_TEST_ADDR (make bench runs it against its ClickHouse)")
	}
	const n = 10_000_000
	ctx := context.Background()
	addr, db := testenv.ClickHouseDB(b)
	src := chtest.Open(b, "default", db)
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, ReadTimeout: 5 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	start := time.Now().Add(-24 * time.Hour).UnixNano()
	for part := int64(0); part < n; part += 1_000_000 {
		if err := conn.Exec(ctx, "INSERT INTO "+db+".input_values (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json) "+
			"SELECT concat('entity-', toString(number % 1000)), 'temperature', toInt64(? + number * 8640000), toInt64(? + number * 8640000 + 5000000), "+
			"concat('SN-', toString(number % 1000)), 'temp', concat(toString(number), '-0000-4000-8000-000000000000'), toString(number % 400 / 10) FROM system.numbers WHERE number >= ? LIMIT 1000000",
			start, start, part); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		dir := b.TempDir()
		counts := map[string]int64{}
		t0 := time.Now()
		if err := backupTables(ctx, src, dir, counts); err != nil {
			b.Fatal(err)
		}
		backedUp := time.Since(t0)
		_, fresh := testenv.ClickHouseDB(b)
		dst := chtest.Open(b, "default", fresh)
		t1 := time.Now()
		if err := restoreTables(ctx, dst, dir, counts); err != nil {
			b.Fatal(err)
		}
		restored := time.Since(t1)
		if got, err := dst.Rows(ctx, "input_values"); err != nil || got != n {
			b.Fatalf("restored %d readings (%v), want %d", got, err, n)
		}
		b.ReportMetric(backedUp.Seconds(), "backup_s")
		b.ReportMetric(restored.Seconds(), "restore_s")
	}
}
