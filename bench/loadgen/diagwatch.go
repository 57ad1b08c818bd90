package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
)

// diagTables are the diagnostics tables, in the order of diagRows.
var diagTables = [...]string{"device_stats", "device_stats_hourly", "device_seen", "device_rejections", "device_keys"}

// mergedKeys are the keys of the tables whose merges fold rows with equal
// keys into one ("": none).
var mergedKeys = [len(diagTables)]string{"serial, minute, kind", "serial, hour, kind", "serial", "", ""}

// diagRows are rows per diagnostics table.
type diagRows [len(diagTables)]int

func (d diagRows) String() string {
	var parts []string
	for i, t := range diagTables {
		parts = append(parts, t+"="+strconv.Itoa(d[i]))
	}
	return strings.Join(parts, " ")
}

// fleetSerial tells the provisioned fleet's serials from a flood's.
func fleetSerial(s string) bool { return strings.HasPrefix(s, "bench-") }

// tableRows asks ClickHouse how many rows each diagnostics table holds: in
// all, and of the fleet's serials. A table whose merges fold rows together
// (summing, replacing) is counted as merged, by its distinct keys, so that
// a count does not fall when a merge runs between two (count() with FINAL
// answers 0 on 18.16's SummingMergeTree).
func tableRows(ctx context.Context, cfg config) (all, fleet diagRows, err error) {
	var qs []string
	for i, t := range diagTables {
		f, args := "count", ""
		if k := mergedKeys[i]; k != "" {
			f, args = "uniqExact", k
		}
		cond := "startsWith(serial, 'bench-')"
		if args != "" {
			cond = ", " + cond
		}
		qs = append(qs, fmt.Sprintf("SELECT '%s', %s(%s), %sIf(%s%s) FROM %s.%s", t, f, args, f, args, cond, cfg.database, t))
	}
	out, err := chQuery(ctx, cfg, strings.Join(qs, " UNION ALL ")+" FORMAT TabSeparated")
	if err != nil {
		return all, fleet, err
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		for i, t := range diagTables {
			if len(f) == 3 && f[0] == t {
				all[i], _ = strconv.Atoi(f[1])
				fleet[i], _ = strconv.Atoi(f[2])
			}
		}
	}
	return all, fleet, nil
}

// reportTally is what the diagnostics reports sent during a level would
// add to each table, the flood's serials (every one not the fleet's, ""
// included) per counted minute apart from the fleet's.
type reportTally struct {
	msgs, bytes int
	flood       map[int64]*diagRows
	fleet       diagRows
}

func (t *reportTally) add(r diag.Report, size int) {
	t.msgs++
	t.bytes += size
	if t.flood == nil {
		t.flood = map[int64]*diagRows{}
	}
	if t.flood[r.Minute] == nil {
		t.flood[r.Minute] = &diagRows{}
	}
	row := func(table int, serial string) {
		if fleetSerial(serial) {
			t.fleet[table]++
		} else {
			t.flood[r.Minute][table]++
		}
	}
	for _, c := range r.Counts {
		row(0, c.Serial) // a count is a row of the minute table and of the hourly one
		row(1, c.Serial)
	}
	for _, s := range r.Seen {
		row(2, s.Serial)
	}
	for _, x := range r.Rejections {
		row(3, x.Serial)
	}
	for _, k := range r.Keys {
		row(4, k.Serial)
	}
}

// busiest is the flood's rows of the minute that had the most, and the
// number of minutes counted.
func (t *reportTally) busiest() (most diagRows, minutes int) {
	best := -1
	for _, d := range t.flood {
		sum := 0
		for _, n := range d {
			sum += n
		}
		if sum > best {
			best, most = sum, *d
		}
	}
	return most, len(t.flood)
}

// reportWatch reads the diagnostics reports as they are sent (the
// operator's NATS user: NATS_OPERATOR_PASSWORD).
type reportWatch struct {
	nc  *nats.Conn
	sub *nats.Subscription
	mu  sync.Mutex
	t   reportTally
}

func watchReports(url string) (*reportWatch, error) {
	nc, err := nats.Connect(url, nats.UserInfo("operator", os.Getenv("NATS_OPERATOR_PASSWORD")))
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	w := &reportWatch{nc: nc}
	w.sub, err = nc.Subscribe(bus.DefaultNames.DiagSubject(), func(m *nats.Msg) {
		var r diag.Report
		if json.Unmarshal(m.Data, &r) == nil {
			w.mu.Lock()
			w.t.add(r, len(m.Data))
			w.mu.Unlock()
		}
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	return w, nil
}

// stop ends the watch and returns what it saw, with the diagnostics
// stream's state: messages and bytes it holds, and the last sequence.
func (w *reportWatch) stop(ctx context.Context) (reportTally, jetstream.StreamState, error) {
	defer w.nc.Close()
	_ = w.sub.Drain()
	for w.sub.IsValid() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	w.mu.Lock()
	t := w.t
	w.mu.Unlock()
	js, err := jetstream.New(w.nc)
	if err != nil {
		return t, jetstream.StreamState{}, err
	}
	s, err := js.Stream(ctx, bus.DefaultNames.DiagStream)
	if err != nil {
		return t, jetstream.StreamState{}, err
	}
	return t, s.CachedInfo().State, nil
}
