package chstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRollupCost prices ways of feeding the rollups in ClickHouse's
// own CPU at 5,000 readings/s from 50,000 devices (one reading each every
// 10 s), inserted as the writer does: 40 value inserts a second of 125
// rows, and the raw messages every 500 ms. "none" feeds no rollup;
// "views" adds two materialized views (minutes and hours, aggregate
// states: every value insert writes two more parts); "marks" is what
// writer-worker does (internal/rollup): the minutes marked every 500 ms
// with the raw messages, and every minute (ROLLUP_EVERY seconds) those
// minutes and their hours computed again from the readings. It reports
// the server's CPU as a share of one core, over two minutes of each.
// Needs the server's process id:
//
//	CLICKHOUSE_TEST_ADDR=127.0.0.1:19200 CLICKHOUSE_PID=$(cat .run/bench/clickhouse/pid) \
//	  go test -run '^$' -bench RollupCost -benchtime 1x ./writer-worker/internal/chstore/
func BenchmarkRollupCost(b *testing.B) {
	pid, _ := strconv.Atoi(os.Getenv("CLICKHOUSE_PID"))
	if pid == 0 {
		b.Skip("needs CLICKHOUSE_PID, the server's process id")
	}
	const (
		devices  = 50000
		inserts  = 40 // a second
		rows     = 125
		duration = 2 * time.Minute
	)
	for _, feed := range []string{"none", "views", "marks"} {
		every, _ := strconv.Atoi(os.Getenv("ROLLUP_EVERY"))
		if every <= 0 {
			every = 60 // internal/rollup's Interval
		}
		b.Run(feed, func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			if feed == "views" {
				for _, t := range Tiers {
					for _, q := range []string{
						"CREATE TABLE %[1]s.mv_%[2]s (entity String, input String, bucket Int64, readings AggregateFunction(uniqExact, UInt64), " +
							"numbers AggregateFunction(count, Float64), min_value AggregateFunction(min, Float64), max_value AggregateFunction(max, Float64), " +
							"sum_value AggregateFunction(sum, Float64), last AggregateFunction(argMax, String, Int64)) " +
							"ENGINE = AggregatingMergeTree() PARTITION BY toYYYYMM(toDateTime(bucket)) ORDER BY (entity, input, bucket)",
						"CREATE MATERIALIZED VIEW %[1]s.mv_%[2]s_view TO %[1]s.mv_%[2]s AS SELECT entity, input, intDiv(ts_ns, %[3]d) * %[4]d AS bucket, " +
							"uniqExactState(cityHash64(event_id, device_input)) AS readings, countState(%[5]s) AS numbers, minState(%[5]s) AS min_value, " +
							"maxState(%[5]s) AS max_value, sumState(%[5]s) AS sum_value, argMaxState(value_json, ts_ns) AS last FROM %[1]s.input_values GROUP BY entity, input, bucket",
					} {
						if err := s.pipe.conn().Exec(ctx, fmt.Sprintf(q, s.db, t.Table, t.Step*1e9, t.Step, "multiIf(value_json = 'true', 1., value_json = 'false', 0., toFloat64OrNull(value_json))")); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			waitForMerges(b, s)
			tick := time.NewTicker(time.Second / inserts)
			defer tick.Stop()
			var pending []ValueRow
			var msgs []MessageRow
			rolled := time.Now().UnixNano()
			rollups := make(chan error, 1)
			rollups <- nil
			n := 0
			cpu0 := processCPU(b, pid)
			start := time.Now()
			b.ResetTimer()
			for i := 0; time.Since(start) < duration; i++ {
				<-tick.C
				now := time.Now().UnixNano()
				batch := make([]ValueRow, rows)
				for r := range batch {
					dev := n % devices
					id := fmt.Sprintf("%08x-0000-4000-8000-%012d", n, n)
					batch[r] = ValueRow{Entity: fmt.Sprintf("entity-%05d", dev), Input: "temperature", TsNs: now - 1e9, ReceivedNs: now,
						Serial: fmt.Sprintf("SN-%06d", dev), DeviceInput: "temp", EventID: id, JSON: []byte(strconv.FormatFloat(float64(n%400)/10, 'f', -1, 64))}
					msgs = append(msgs, MessageRow{Serial: batch[r].Serial, TsNs: now, EventID: id, Payload: []byte(`{"serial":"` + batch[r].Serial + `","data":{"temp":` + string(batch[r].JSON) + `}}`), Outcome: "stored"})
					n++
				}
				if err := s.InsertValues(ctx, batch); err != nil {
					b.Fatal(err)
				}
				pending = append(pending, batch...)
				if i%(inserts/2) != inserts/2-1 {
					continue
				}
				// Every 500 ms: the raw messages, and the marks.
				if err := s.InsertMessages(ctx, msgs); err != nil {
					b.Fatal(err)
				}
				msgs = msgs[:0]
				if feed == "marks" {
					if err := s.InsertMarks(ctx, time.Now().UnixNano(), MarksOf(pending)); err != nil {
						b.Fatal(err)
					}
					if i%(every*inserts) == every*inserts-1 {
						// In the background, as internal/rollup runs it.
						if err := <-rollups; err != nil {
							b.Fatal(err)
						}
						from, upTo := rolled, time.Now().Add(-time.Second).UnixNano()
						go func() { rollups <- s.Rollup(ctx, from, upTo, 0, time.Now().UnixNano()) }()
						rolled = upTo
					}
				}
				pending = pending[:0]
			}
			if err := <-rollups; err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			used := processCPU(b, pid) - cpu0
			b.ReportMetric(100*used.Seconds()/elapsed.Seconds(), "server_cpu_%")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "readings/s")
		})
	}
}
