package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"
)

// floodLevel drives the honest fleet open loop at rate alone, then again
// beside a flood (-flood) at -flood-rate; with rate 0, the flood alone.
func (b *bench) floodLevel(ctx context.Context, rate int) error {
	if rate > 0 {
		if err := b.floodRun(ctx, rate, 0); err != nil {
			return err
		}
		sleep(ctx, b.cfg.settle)
	}
	return b.floodRun(ctx, rate, b.cfg.floodRate)
}

// floodRun drives the honest fleet open loop at rate (0: none) and, beside
// it, a flood at floodRate (0: none) from a botnet of -flood-per-source
// requests per address. Besides the fleet's usual lines it reports the
// flood's answers, ingest-api's CPU per request, ingest-api's and
// writer-worker's RSS before, at the peak and -flood-settle after, the rows
// the diagnostics tables gained, and (with -nats) the reports sent: their
// bytes, and the flood's rows in its busiest counted minute.
func (b *bench) floodRun(ctx context.Context, rate, floodRate int) error {
	cfg := b.cfg
	b.emit("flood_level fleet_rate=%d flood=%s flood_rate=%d per_source=%d duration=%s", rate, cfg.flood, floodRate, cfg.floodPerSource, cfg.duration)
	rows0, fleet0, err := tableRows(ctx, cfg)
	if err != nil {
		return fmt.Errorf("diagnostics rows: %w", err)
	}
	var w *reportWatch
	if cfg.nats != "" {
		if w, err = watchReports(cfg.nats); err != nil {
			return err
		}
	}
	before, busy0, t0 := rssMB(b.pids), machineBusy(), time.Now()
	u, _ := url.Parse(cfg.target)
	flood := openLoad{req: floodReq(u.Host, cfg.flood, b.runID, b.serials), pool: newBotnet(u.Host, cfg.floodPerSource)}
	var fr *result
	l, err := b.measure(ctx, func() (*result, error) {
		var wg sync.WaitGroup
		var ferr error
		if floodRate > 0 {
			wg.Go(func() { fr, ferr = driveOpen(ctx, flood, floodRate, cfg.duration) })
		}
		hr, herr := newResult(), error(nil)
		if rate > 0 {
			hr, herr = driveOpen(ctx, b.fleetLoad(""), rate, cfg.duration)
		}
		wg.Wait()
		return hr, errors.Join(herr, ferr)
	})
	if err != nil {
		return err
	}
	busy := (machineBusy() - busy0) / time.Since(t0).Seconds() * 100
	if rate > 0 {
		b.emitOpen(rate, l)
	}
	requests := l.sent
	if fr != nil {
		requests += fr.sent
		b.emit("  flood kind=%s rate=%d per_source=%d answered_per_s=%.0f elapsed_s=%.1f sources=%d conns=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f statuses=%s conn_errors=%d",
			cfg.flood, floodRate, cfg.floodPerSource, float64(fr.sent-fr.errors)/fr.elapsed.Seconds(), fr.elapsed.Seconds(),
			botsFor(fr.scheduled, cfg.floodPerSource), fr.conns, fr.pct(50), fr.pct(99), fr.pct(100), fmtStatuses(fr.statuses), fr.errors)
	}
	if rate == 0 {
		b.emit("  cpu_pct %s", fmtCPU(fmt.Sprintf("flood_rate=%d", floodRate), l.cpu))
	}
	if requests > 0 {
		b.emit("  api_cpu_us_per_request=%.1f requests=%d api_cpu_pct=%.1f machine_busy_pct=%.0f", l.cpu["api"]/100*l.sampled.Seconds()/float64(requests)*1e6, requests, l.cpu["api"], busy)
	}
	sleep(ctx, cfg.floodSettle)
	after := rssMB(b.pids)
	for _, n := range []string{"api", "writer"} {
		b.emit("  rss_mb %s before=%.1f peak=%.1f after_%s=%.1f", n, before[n], l.rss[n], cfg.floodSettle, after[n])
	}
	rows1, fleet1, err := tableRows(ctx, cfg)
	if err != nil {
		return fmt.Errorf("diagnostics rows: %w", err)
	}
	var added, fleet diagRows
	for i := range added {
		added[i], fleet[i] = rows1[i]-rows0[i], fleet1[i]-fleet0[i]
	}
	b.emit("  clickhouse_rows_added %s", added)
	b.emit("  clickhouse_rows_added_fleet %s", fleet)
	if w != nil {
		t, st, err := w.stop(ctx)
		if err != nil {
			return fmt.Errorf("diagnostics stream: %w", err)
		}
		most, minutes := t.busiest()
		b.emit("  reports msgs=%d bytes=%d stream_msgs=%d stream_bytes=%d stream_last_seq=%d", t.msgs, t.bytes, st.Msgs, st.Bytes, st.LastSeq)
		b.emit("  report_rows_flood_busiest_minute minutes=%d %s", minutes, most)
		b.emit("  report_rows_fleet %s", t.fleet)
	}
	return nil
}

// rssMB is each process's resident set now, in MB.
func rssMB(pids map[string]int) map[string]float64 {
	m := map[string]float64{}
	for n, pid := range pids {
		_, kb := procStat(pid)
		m[n] = float64(kb) / 1024
	}
	return m
}
