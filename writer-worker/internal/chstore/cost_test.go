package chstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkInsertCost prices the writer's value inserts in ClickHouse's own
// CPU, which the writer's pacing (internal/batch's insert intervals) rests
// on: rows-row inserts into input_values at a fixed rate, each size in a
// table of its own once the last one's merges are done. It reports the
// server's CPU per insert and per row; rerun it on other hardware or
// ClickHouse releases. Needs the server's process id:
//
//	CLICKHOUSE_TEST_ADDR=127.0.0.1:19200 CLICKHOUSE_PID=$(cat .run/bench/clickhouse/pid) \
//	  go test -run '^$' -bench InsertCost -benchtime 2000x ./writer-worker/internal/chstore/
func BenchmarkInsertCost(b *testing.B) {
	pid, _ := strconv.Atoi(os.Getenv("CLICKHOUSE_PID"))
	if pid == 0 {
		b.Skip("needs CLICKHOUSE_PID, the server's process id")
	}
	s := benchStore(b)
	db, ctx := s.db, context.Background()
	for _, c := range []struct{ rows, rate int }{{20, 200}, {1, 200}, {100, 50}, {500, 20}} {
		b.Run(fmt.Sprintf("rows=%d/rate=%d", c.rows, c.rate), func(b *testing.B) {
			table := fmt.Sprintf("%s.input_values_%d_%d", db, c.rows, c.rate)
			if err := s.pipe.conn().Exec(ctx, "CREATE TABLE "+table+" AS "+db+".input_values"); err != nil {
				b.Fatal(err)
			}
			waitForMerges(b, s)
			tick := time.NewTicker(time.Second / time.Duration(c.rate))
			defer tick.Stop()
			cpu0 := processCPU(b, pid)
			b.ResetTimer()
			for i := range b.N {
				<-tick.C
				batch, err := s.pipe.conn().PrepareBatch(ctx, "INSERT INTO "+table+" (entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json)")
				if err != nil {
					b.Fatal(err)
				}
				for r := range c.rows {
					n, now := i*c.rows+r, time.Now().UnixNano()
					dev := n % 1000
					if err := batch.Append(fmt.Sprintf("entity-%04d", dev), "temperature", now-10e9, now, fmt.Sprintf("SN-%06d", dev), "temp",
						fmt.Sprintf("%08x-0000-4000-8000-%012d", n, n), strconv.FormatFloat(float64(n%400)/10, 'f', -1, 64)); err != nil {
						b.Fatal(err)
					}
				}
				if err := batch.Send(); err != nil {
					b.Fatal(err)
				}
			}
			used := processCPU(b, pid) - cpu0
			b.ReportMetric(used.Seconds()*1000/float64(b.N), "server_cpu_ms/insert")
			b.ReportMetric(used.Seconds()*1e6/float64(b.N*c.rows), "server_cpu_us/row")
		})
	}
}

// waitForMerges waits, up to a minute, until no merge runs in s's database.
func waitForMerges(b *testing.B, s *Store) {
	for range 120 {
		var n uint64
		if err := s.pipe.conn().QueryRow(context.Background(), "SELECT count() FROM system.merges WHERE database = ?", s.db).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// processCPU is a process's user and system CPU time so far, from /proc.
func processCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	sys, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("unreadable /proc/%d/stat", pid)
	}
	return time.Duration(user+sys) * 10 * time.Millisecond // clock ticks: 100 per second on Linux
}
