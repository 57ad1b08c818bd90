package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func run(ctx context.Context, cfg config) error {
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	runID := hex.EncodeToString(rb[:])
	tokens := make(map[string]string, cfg.devices)
	serials := make([]string, cfg.devices)
	for i := range serials {
		serials[i] = fmt.Sprintf("bench-%05d", i)
		tokens[serials[i]] = fmt.Sprintf("bt-%s-%05d", runID, i)
	}
	b := &bench{cfg: cfg, runID: runID, serials: serials, entity: "bench-" + runID, pids: map[string]int{"loadgen": os.Getpid()}}
	maps.Copy(b.pids, cfg.pids)
	if err := provision(ctx, cfg, b.entity, serials, tokens); err != nil {
		return err
	}
	ceil, err := startCeiling(tokens)
	if err != nil {
		return err
	}
	defer ceil.close()

	u, _ := url.Parse(cfg.target)
	mk := func(host string) target {
		t := target{host: host, reqs: make([][]byte, len(serials))}
		for i, s := range serials {
			if cfg.batch > 0 {
				t.reqs[i] = request(host, "/api/v1/deviceapi/events", tokens[s], backlogBody(s, i, cfg.batch))
				continue
			}
			t.reqs[i] = request(host, "/api/v1/deviceapi/event", tokens[s], fmt.Appendf(nil, `{"serial":%q,"data":{"v":%d.5}}`, s, i))
		}
		return t
	}
	b.service, b.ceiling = mk(u.Host), mk(ceil.addr)
	b.emit("# run %s %s devices=%d duration=%s keyed=%s batch=%d", runID, time.Now().UTC().Format(time.RFC3339), cfg.devices, cfg.duration, cfg.keyedMode(), cfg.batch)
	level, levels := b.closedLevel, cfg.levels
	switch {
	case cfg.flood != "":
		level, levels = b.floodLevel, cfg.rates
	case len(cfg.rates) > 0:
		level, levels = b.openLevel, cfg.rates
	}
	for _, n := range levels {
		if err := level(ctx, n); err != nil {
			return errors.Join(err, writeLines(cfg.out, b.lines))
		}
		sleep(ctx, cfg.settle)
	}
	return writeLines(cfg.out, b.lines)
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

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func fmtStatuses(m map[int]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d:%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func fmtCPU(label string, cpu map[string]float64) string {
	parts := []string{label}
	total := 0.0
	for _, n := range slices.Sorted(maps.Keys(cpu)) {
		parts = append(parts, fmt.Sprintf("%s=%.0f", n, cpu[n]))
		total += cpu[n]
	}
	return strings.Join(append(parts, fmt.Sprintf("total=%.0f", total)), " ")
}

// provision creates the devices through the workspace API, 16 at a time.
func provision(ctx context.Context, cfg config, entity string, serials []string, tokens map[string]string) error {
	client := &http.Client{Timeout: 10 * time.Second}
	put := func(s string) error {
		body := fmt.Sprintf(`{"connectionType":"API","accessToken":%q,"inputs":[{"name":"v","entity":%q,"entityInput":"v"},{"name":"w","entity":%q,"entityInput":"w"}]}`, tokens[s], entity, entity)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, cfg.workspace+"/api/v1/admin/devices/"+s, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cfg.adminToken)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("PUT %s: %d", s, resp.StatusCode)
		}
		return nil
	}
	errs := make(chan error, len(serials))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range serials {
		sem <- struct{}{}
		wg.Go(func() {
			errs <- put(s)
			<-sem
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fmt.Errorf("provision: %w", err)
		}
	}
	return nil
}

// countStored asks ClickHouse over HTTP how many values the run stored.
func countStored(ctx context.Context, cfg config, entity string, fromMs, toMs int64) (int, error) {
	out, err := chQuery(ctx, cfg, fmt.Sprintf("SELECT count() FROM %s.input_values WHERE entity = '%s' AND received_ns >= %d AND received_ns <= %d", cfg.database, entity, fromMs*1e6, toMs*1e6))
	if err != nil {
		return 0, fmt.Errorf("count stored: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// chQuery runs q on ClickHouse's HTTP interface and returns its output.
func chQuery(ctx context.Context, cfg config, q string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.clickhouse+"/", strings.NewReader(q))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	return string(b), nil
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
