// Command chcost measures what ClickHouse spends on the service's value
// inserts: it creates the schema in a fresh database, inserts synthetic rows
// into input_values at a fixed rate and batch size, and reads the server's
// CPU time from /proc. The writer's pacing (the batch package's insert intervals)
// rests on these figures; rerun it on other hardware or ClickHouse releases.
//
//	go run ./bench/chcost -addr 127.0.0.1:19000 -pid $(cat .run/clickhouse/pid) -runs 20x200,1x200,100x50,500x20
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/devicehub/eventservice/writer-worker/schema"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "ClickHouse native address")
	pid := flag.Int("pid", 0, "clickhouse-server's process id (its CPU is read from /proc)")
	runs := flag.String("runs", "20x200,1x200,100x50,500x20", "comma-separated ROWSxINSERTS_PER_SECOND")
	dur := flag.Duration("duration", 20*time.Second, "length of each run")
	bare := flag.Bool("without-received", false, "also price each run without the received_ns column (what the column costs)")
	flag.Parse()
	if *pid == 0 {
		fmt.Fprintln(os.Stderr, "-pid is required")
		os.Exit(2)
	}
	if err := run(*addr, *pid, *runs, *dur, *bare); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(addr string, pid int, runs string, dur time.Duration, bare bool) error {
	ctx := context.Background()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		return err
	}
	defer conn.Close()
	db := fmt.Sprintf("chcost_%d", time.Now().Unix())
	// The schema writer-worker applies: chcost prices inserts into
	// exactly those tables.
	for _, stmt := range schema.Statements(db) {
		if err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	// Dropping is left to the user: on ext4 without a journal, deleting
	// many part files makes the next ~30 s of file creation dearer.
	fmt.Printf("# database %s (drop it when done)\n", db)
	for i, spec := range strings.Split(runs, ",") {
		var rows, rate int
		if _, err := fmt.Sscanf(spec, "%dx%d", &rows, &rate); err != nil || rows < 1 || rate < 1 {
			return fmt.Errorf("run %q: want ROWSxRATE", spec)
		}
		variants := []bool{true}
		if bare {
			variants = append(variants, false)
		}
		for _, received := range variants {
			// A table of its own per run, and the previous run's
			// merges finished first: each line prices its own parts.
			table := fmt.Sprintf("%s.input_values_%d_%t", db, i, received)
			if err := conn.Exec(ctx, "CREATE TABLE "+table+" AS "+db+".input_values"); err != nil {
				return err
			}
			if !received {
				if err := conn.Exec(ctx, "ALTER TABLE "+table+" DROP COLUMN received_ns"); err != nil {
					return err
				}
			}
			if err := settle(ctx, conn, db); err != nil {
				return err
			}
			if err := measure(ctx, conn, table, pid, rows, rate, dur, received); err != nil {
				return err
			}
		}
	}
	return nil
}

// settle waits, up to a minute, until no merge runs in db.
func settle(ctx context.Context, conn clickhouse.Conn, db string) error {
	for range 120 {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.merges WHERE database = ?", db).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

// measure inserts rows-row batches at rate per second for dur, with the
// writer's columns (received ns beside the reading time) or without.
func measure(ctx context.Context, conn clickhouse.Conn, table string, pid, rows, rate int, dur time.Duration, received bool) error {
	cols, width := "entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json", 8
	if !received {
		cols, width = "entity, input, ts_ns, serial, device_input, event_id, value_json", 7
	}
	args := make([]any, width)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	user0, sys0, err := cpu(pid)
	if err != nil {
		return err
	}
	start := time.Now()
	var lat []time.Duration
	n := 0
	for time.Since(start) < dur {
		<-tick.C
		t0 := time.Now()
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+cols+")")
		if err != nil {
			return err
		}
		for range rows {
			n++
			dev := n % 1000
			now := time.Now().UnixNano()
			args = append(args[:0], fmt.Sprintf("entity-%04d", dev), "temperature", now-10e9)
			if received {
				args = append(args, now)
			}
			args = append(args, fmt.Sprintf("SN-%06d", dev), "temp", fmt.Sprintf("%08x-0000-4000-8000-%012d", n, n), strconv.FormatFloat(float64(n%400)/10, 'f', -1, 64))
			if err := b.Append(args...); err != nil {
				return err
			}
		}
		if err := b.Send(); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start).Seconds()
	user1, sys1, err := cpu(pid)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	ins := float64(len(lat)) / el
	cpuPct := 100 * (user1 + sys1 - user0 - sys0) / el
	fmt.Printf("received_ns=%t rows_per_insert=%d inserts_per_s=%.0f rows_per_s=%.0f clickhouse_cpu_pct=%.0f sys_pct=%.0f cpu_ms_per_insert=%.2f insert_p50_ms=%.2f insert_p99_ms=%.2f\n",
		received, rows, ins, float64(n)/el, cpuPct, 100*(sys1-sys0)/el, 10*cpuPct/ins,
		float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)*99/100].Microseconds())/1000)
	return nil
}

// cpu returns a process's user and system CPU seconds.
func cpu(pid int) (user, sys float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	return u / 100, k / 100, nil // clock ticks: 100 per second on Linux
}
