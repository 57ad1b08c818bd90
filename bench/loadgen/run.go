package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func run(ctx context.Context, cfg config) error {
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	runID := hex.EncodeToString(rb[:])
	entity := "bench-" + runID
	tokens := make(map[string]string, cfg.devices)
	serials := make([]string, cfg.devices)
	for i := range serials {
		serials[i] = fmt.Sprintf("bench-%05d", i)
		tokens[serials[i]] = fmt.Sprintf("bt-%s-%05d", runID, i)
	}
	if err := provision(ctx, cfg, entity, serials, tokens); err != nil {
		return err
	}
	ceil, err := startCeiling(tokens)
	if err != nil {
		return err
	}
	defer ceil.close()

	u, _ := url.Parse(cfg.target)
	// values is how many values one confirmed request stores.
	values := 1
	mk := func(host string) [][]byte {
		reqs := make([][]byte, len(serials))
		for i, s := range serials {
			if cfg.batch > 0 {
				reqs[i] = request(host, "/api/v1/deviceapi/events", tokens[s], backlogBody(s, i, cfg.batch))
				continue
			}
			reqs[i] = request(host, "/api/v1/deviceapi/event", tokens[s], fmt.Appendf(nil, `{"serial":%q,"data":{"v":%d.5}}`, s, i))
		}
		return reqs
	}
	if cfg.batch > 0 {
		values = 2 * cfg.batch
	}
	serviceReqs, ceilingReqs := mk(u.Host), mk(ceil.addr)

	pids := map[string]int{"loadgen": os.Getpid()}
	for k, v := range cfg.pids {
		pids[k] = v
	}
	var lines []string
	emit := func(s string) {
		fmt.Println(s)
		lines = append(lines, s)
	}
	emit(fmt.Sprintf("# run %s %s devices=%d duration=%s keyed=%v batch=%d", runID, time.Now().UTC().Format(time.RFC3339), cfg.devices, cfg.duration, cfg.keyed, cfg.batch))
	if len(cfg.rates) > 0 {
		err := runOpen(ctx, cfg, runID, entity, serviceReqs, pids, emit)
		return errors.Join(err, writeLines(cfg.out, lines))
	}
	for _, conc := range cfg.levels {
		keyed := ""
		if cfg.keyed {
			keyed = fmt.Sprintf("%s-%d", runID, conc)
		}
		cr, err := drive(ctx, "http://"+ceil.addr, conc, cfg.duration, ceilingReqs, keyed)
		if err != nil {
			return err
		}
		sleep(ctx, cfg.settle)
		startMs := time.Now().UnixMilli()
		smp := startSampler(pids)
		r, err := drive(ctx, cfg.target, conc, cfg.duration, serviceReqs, keyed)
		rss, cpu := smp.finish()
		if err != nil {
			return err
		}
		sleep(ctx, time.Second) // let anything answered late land before counting
		stored, err := countStored(ctx, cfg, entity, startMs-1000, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		eps := float64(r.confirmed) / r.elapsed.Seconds()
		ceilRPS := float64(cr.confirmed) / cr.elapsed.Seconds()
		if cfg.batch > 0 {
			// readings: messages of 2 values each
			emit(fmt.Sprintf("batch=%d conc=%d readings_per_s=%.0f values_per_s=%.0f requests_per_s=%.0f p50_ms=%.2f p99_ms=%.2f ceiling_rps=%.0f rss_mb_api=%.1f rss_mb_mapper=%.1f rss_mb_writer=%.1f",
				cfg.batch, conc, eps*float64(cfg.batch), eps*float64(values), eps, r.pct(0.50), r.pct(0.99), ceilRPS, rss["api"], rss["mapper"], rss["writer"]))
		} else {
			emit(fmt.Sprintf("conc=%d confirmed_eps=%.0f p50_ms=%.2f p99_ms=%.2f ceiling_rps=%.0f ratio=%.3f rss_mb_api=%.1f rss_mb_mapper=%.1f rss_mb_writer=%.1f",
				conc, eps, r.pct(0.50), r.pct(0.99), ceilRPS, eps/ceilRPS, rss["api"], rss["mapper"], rss["writer"]))
		}
		want := r.confirmed * values
		emit(fmt.Sprintf("  check conc=%d sent=%d confirmed=%d values_expected=%d stored=%d missing=%d extra=%d conn_errors=%d statuses=%s",
			conc, r.sent, r.confirmed, want, stored, max(0, want-stored), max(0, stored-want), r.errors, fmtStatuses(r.statuses)))
		emit("  cpu_pct " + fmtCPU(fmt.Sprintf("conc=%d", conc), cpu) + fmt.Sprintf(" p999_ms=%.2f max_ms=%.2f", r.pct(0.999), r.pct(1)))
		if g := smp.growth(); len(g) > 0 {
			line := fmt.Sprintf("  rss_mb_5s_to_end conc=%d", conc)
			for _, n := range []string{"api", "mapper", "writer"} {
				if v, ok := g[n]; ok {
					line += fmt.Sprintf(" %s=%.1f->%.1f", n, v[0], v[1])
				}
			}
			emit(line)
		}
		sleep(ctx, cfg.settle)
	}
	return writeLines(cfg.out, lines)
}

// writeLines appends the result lines to the file out (none: nothing).
func writeLines(out string, lines []string) error {
	if out == "" {
		return nil
	}
	f, err := os.OpenFile(out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, strings.Join(lines, "\n"))
	return err
}

// runOpen drives each open-loop rate in turn and reports latency from the
// scheduled times, the statuses, the exact reconciliation, and the CPU each
// event cost the programs, NATS and ClickHouse together.
func runOpen(ctx context.Context, cfg config, runID, entity string, reqs [][]byte, pids map[string]int, emit func(string)) error {
	for _, rate := range cfg.rates {
		keyed := ""
		if cfg.keyed {
			keyed = fmt.Sprintf("%s-open-%d", runID, rate)
		}
		startMs := time.Now().UnixMilli()
		smp := startSampler(pids)
		r, err := driveOpen(ctx, cfg.target, cfg.openConns, rate, cfg.duration, reqs, keyed)
		_, cpu := smp.finish()
		if err != nil {
			return err
		}
		sleep(ctx, time.Second)
		stored, err := countStored(ctx, cfg, entity, startMs-1000, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		achieved := float64(r.confirmed) / cfg.duration.Seconds()
		emit(fmt.Sprintf("open rate=%d conns=%d keyed=%v achieved_eps=%.0f p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f statuses=%s conn_errors=%d",
			rate, r.conns, cfg.keyed, achieved, r.pct(50), r.pct(99), r.pct(99.9), float64(r.hist.Max())/1000, fmtStatuses(r.statuses), r.errors))
		emit(fmt.Sprintf("  check rate=%d scheduled=%d sent=%d confirmed=%d stored=%d missing=%d extra=%d",
			rate, r.scheduled, r.sent, r.confirmed, stored, max(0, r.confirmed-stored), max(0, stored-r.confirmed)))
		service := 0.0
		for name, pct := range cpu {
			if name != "loadgen" {
				service += pct
			}
		}
		perEvent := 0.0
		if r.confirmed > 0 {
			// % of a core over the level's wall time, per confirmed event
			perEvent = service / 100 * r.elapsed.Seconds() / float64(r.confirmed) * 1e6
		}
		emit("  cpu_pct " + fmtCPU(fmt.Sprintf("rate=%d", rate), cpu) + fmt.Sprintf(" service_us_per_event=%.0f", perEvent))
		sleep(ctx, cfg.settle)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func fmtStatuses(m map[int]int) string {
	var keys []int
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d:%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func fmtCPU(label string, cpu map[string]float64) string {
	names := make([]string, 0, len(cpu))
	for k := range cpu {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := []string{label}
	total := 0.0
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%.0f", n, cpu[n]))
		total += cpu[n]
	}
	return strings.Join(append(parts, fmt.Sprintf("total=%.0f", total)), " ")
}

// provision creates the devices through the workspace API, 16 at a time.
func provision(ctx context.Context, cfg config, entity string, serials []string, tokens map[string]string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	work := make(chan string)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				body := fmt.Sprintf(`{"connectionType":"API","accessToken":%q,"inputs":[{"name":"v","entity":%q,"entityInput":"v"},{"name":"w","entity":%q,"entityInput":"w"}]}`, tokens[s], entity, entity)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, cfg.target+"/api/v1/admin/devices/"+s, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+cfg.adminToken)
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("PUT %s: %d", s, resp.StatusCode)
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, s := range serials {
		work <- s
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("provision: %w", err)
	default:
		return nil
	}
}

// countStored asks ClickHouse over HTTP how many values the run stored.
func countStored(ctx context.Context, cfg config, entity string, fromMs, toMs int64) (int, error) {
	q := fmt.Sprintf("SELECT count() FROM %s.input_values WHERE entity = '%s' AND received_ns >= %d AND received_ns <= %d", cfg.database, entity, fromMs*1e6, toMs*1e6)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.clickhouse+"/", strings.NewReader(q))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("count stored: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("count stored: %d %s", resp.StatusCode, b)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// backlogBody is a backlog of n messages of two inputs each for device s,
// readings 1 s apart ending now-ish (no ts: each message is stored at its
// receive time, as a device with no clock would send).
func backlogBody(serial string, i, n int) []byte {
	b := fmt.Appendf(nil, `{"serial":%q,"messages":[`, serial)
	for m := range n {
		if m > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"data":{"v":%d.5,"w":%d}}`, i, m)
	}
	return append(b, "]}"...)
}
