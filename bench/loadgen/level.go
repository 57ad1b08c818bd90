package main

import (
	"context"
	"fmt"
	"time"
)

// bench is one run: its targets, the processes it samples and the result
// lines so far.
type bench struct {
	cfg              config
	runID, entity    string
	service, ceiling target
	serials          []string // the provisioned fleet's
	pids             map[string]int
	lines            []string
}

func (b *bench) emit(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Println(s)
	b.lines = append(b.lines, s)
}

// keyPrefix is the Idempotency-Key prefix of a level's requests ("": none).
func (b *bench) keyPrefix(format string, n int) string {
	if !b.cfg.keyed && !b.cfg.mixed {
		return ""
	}
	return fmt.Sprintf(format, b.runID, n)
}

// measure runs drive with the processes sampled, lets anything answered late
// land, and counts what ClickHouse stored from the level.
func (b *bench) measure(ctx context.Context, drive func() (*result, error)) (*result, error) {
	startMs := time.Now().UnixMilli()
	smp := startSampler(b.pids)
	r, err := drive()
	sampled := time.Since(smp.start)
	rss, cpu, growth := smp.finish()
	if err != nil {
		return nil, err
	}
	for i := range r.seconds {
		// The last second may end after the last sample (a level that
		// answered everything early, or a -duration of whole seconds
		// plus a fraction): its CPU is over the part sampled.
		from := r.start.Add(time.Duration(i) * time.Second)
		to := from.Add(time.Second)
		if last := smp.cpus[len(smp.cpus)-1].at; to.After(last) {
			to = last
		}
		r.seconds[i].cpu = cpuOver(smp.cpus, from, to)
	}
	r.rss, r.cpu, r.growth, r.sampled = rss, cpu, growth, sampled
	sleep(ctx, time.Second)
	r.stored, err = countStored(ctx, b.cfg, b.entity, startMs-1000, time.Now().UnixMilli())
	return r, err
}

// closedLevel drives conc connections at the ceiling and then at the service,
// and reports throughput, latency, the exact reconciliation, RSS and CPU.
func (b *bench) closedLevel(ctx context.Context, conc int) error {
	cfg := b.cfg
	keyed := b.keyPrefix("%s-%d", conc)
	cr, err := drive(ctx, b.ceiling, conc, cfg.duration, keyed)
	if err != nil {
		return err
	}
	sleep(ctx, cfg.settle)
	l, err := b.measure(ctx, func() (*result, error) {
		return drive(ctx, b.service, conc, cfg.duration, keyed)
	})
	if err != nil {
		return err
	}
	values := max(1, 2*cfg.batch) // that one confirmed request stores
	eps := float64(l.confirmed) / l.elapsed.Seconds()
	ceilRPS := float64(cr.confirmed) / cr.elapsed.Seconds()
	if cfg.batch > 0 {
		// readings: messages of 2 values each
		b.emit("batch=%d conc=%d readings_per_s=%.0f values_per_s=%.0f requests_per_s=%.0f p50_ms=%.2f p99_ms=%.2f ceiling_rps=%.0f rss_mb_api=%.1f rss_mb_mapper=%.1f rss_mb_writer=%.1f",
			cfg.batch, conc, eps*float64(cfg.batch), eps*float64(values), eps, l.pct(50), l.pct(99), ceilRPS, l.rss["api"], l.rss["mapper"], l.rss["writer"])
	} else {
		b.emit("conc=%d confirmed_eps=%.0f p50_ms=%.2f p99_ms=%.2f ceiling_rps=%.0f ratio=%.3f rss_mb_api=%.1f rss_mb_mapper=%.1f rss_mb_writer=%.1f",
			conc, eps, l.pct(50), l.pct(99), ceilRPS, eps/ceilRPS, l.rss["api"], l.rss["mapper"], l.rss["writer"])
	}
	want := l.confirmed * values
	b.emit("  check conc=%d sent=%d confirmed=%d values_expected=%d stored=%d missing=%d extra=%d conn_errors=%d statuses=%s",
		conc, l.sent, l.confirmed, want, l.stored, max(0, want-l.stored), max(0, l.stored-want), l.errors, fmtStatuses(l.statuses))
	b.emit("  cpu_pct %s p999_ms=%.2f max_ms=%.2f", fmtCPU(fmt.Sprintf("conc=%d", conc), l.cpu), l.pct(99.9), l.pct(100))
	if len(l.growth) > 0 {
		line := fmt.Sprintf("  rss_mb_5s_to_end conc=%d", conc)
		for _, n := range []string{"api", "mapper", "writer"} {
			if v, ok := l.growth[n]; ok {
				line += fmt.Sprintf(" %s=%.1f->%.1f", n, v[0], v[1])
			}
		}
		b.emit("%s", line)
	}
	return nil
}

// openLevel drives one open-loop rate and reports latency from the scheduled
// times, the statuses, the exact reconciliation, and the CPU each event cost
// the programs, NATS and ClickHouse together.
func (b *bench) openLevel(ctx context.Context, rate int) error {
	l, err := b.measure(ctx, func() (*result, error) {
		load := b.fleetLoad(b.keyPrefix("%s-open-%d", rate))
		load.timeline = b.cfg.timeline
		return driveOpen(ctx, load, rate, b.cfg.duration)
	})
	if err != nil {
		return err
	}
	b.emitOpen(rate, l)
	b.emitTimeline(rate, l)
	return nil
}

// fleetLoad is the honest fleet's open load on the service: its devices'
// requests in turn, each with a unique Idempotency-Key starting with keyed
// if set (with -mixed, half of them: each device keyed and unkeyed in turn).
func (b *bench) fleetLoad(keyed string) openLoad {
	t := b.service
	l := openLoad{pool: newFleet(t.host, b.cfg.openConns)}
	if b.cfg.mixed {
		// Each device in turn: keyed one round, not the next.
		n := len(t.reqs)
		l.keyed = func(i int) bool { return (i%n+i/n)%2 == 1 }
	}
	l.req = func(i int) []byte {
		req := t.reqs[i%len(t.reqs)]
		if keyed != "" && (l.keyed == nil || l.keyed(i)) {
			req = withKey(nil, req, keyed, i)
		}
		return req
	}
	return l
}

func (b *bench) emitOpen(rate int, l *result) {
	cfg := b.cfg
	achieved := float64(l.confirmed) / cfg.duration.Seconds()
	b.emit("open rate=%d conns=%d keyed=%s achieved_eps=%.0f p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f statuses=%s conn_errors=%d",
		rate, l.conns, cfg.keyedMode(), achieved, l.pct(50), l.pct(99), l.pct(99.9), l.pct(100), fmtStatuses(l.statuses), l.errors)
	b.emit("  check rate=%d scheduled=%d sent=%d confirmed=%d stored=%d missing=%d extra=%d",
		rate, l.scheduled, l.sent, l.confirmed, l.stored, max(0, l.confirmed-l.stored), max(0, l.stored-l.confirmed))
	if cfg.mixed {
		// Latencies of confirmed answers only; -1 and a ratio of 0: none.
		plain, keyed := &l.split[0], &l.split[1]
		ratio := 0.0
		if plain.hist != nil && keyed.hist != nil {
			ratio = keyed.pct(99) / plain.pct(99)
		}
		b.emit("  mixed rate=%d unkeyed_sent=%d unkeyed_confirmed=%d unkeyed_p50_ms=%.2f unkeyed_p99_ms=%.2f keyed_sent=%d keyed_confirmed=%d keyed_p50_ms=%.2f keyed_p99_ms=%.2f keyed_over_unkeyed_p99=%.2f",
			rate, plain.sent, plain.confirmed, plain.pct(50), plain.pct(99), keyed.sent, keyed.confirmed, keyed.pct(50), keyed.pct(99), ratio)
	}
	service := 0.0
	for name, pct := range l.cpu {
		if name != "loadgen" {
			service += pct
		}
	}
	perEvent := 0.0
	if l.confirmed > 0 {
		// % of a core over the level's wall time, per confirmed event
		perEvent = service / 100 * l.elapsed.Seconds() / float64(l.confirmed) * 1e6
	}
	b.emit("  cpu_pct %s service_us_per_event=%.0f", fmtCPU(fmt.Sprintf("rate=%d", rate), l.cpu), perEvent)
}
