package chstore

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

// An aggregated series is read from the coarsest sources whose buckets nest
// in its step: the hour rollup for the whole hours of the range that are
// rolled up, the minute rollup for the whole minutes around them, the
// readings for the rest (the range's ragged ends, what the rollup has not
// reached yet, and the minutes with marks it has not done: a late reading
// answered stored is charted at once). Each source answers partial buckets
// of the step, merged here; all of them in one query.

// RollupLag is how old a mark is before the rollup reads it. A reading
// whose time is older than this when it is stored is marked before it is
// answered (internal/batch); a newer one with the raw messages, within
// seconds. Series read a rollup only for reading times 2*RollupLag before
// its progress: every reading stored there by then is marked and done.
const RollupLag = 15 * time.Second

// SetRolledUp records that the rollups hold every reading marked up to
// ns (Unix ns; the rollup's progress).
func (s *Store) SetRolledUp(ns int64) { s.rolled.Store(ns) }

// RolledUp is the rollup's progress as SetRolledUp last recorded it (0:
// not known yet, or never rolled up).
func (s *Store) RolledUp() int64 { return s.rolled.Load() }

// piece is part of a series' range, [fromNs, toNs), read from tier (nil:
// the readings).
type piece struct {
	tier         *Tier
	fromNs, toNs int64
}

// span is an interval of reading time, [from, to) in ns.
type span struct{ from, to int64 }

// cover cuts [fromNs, toNs) into pieces: tiers are the usable ones,
// coarsest first, cutNs is where they end, and holes (sorted) are spans no
// tier may be read for.
func cover(fromNs, toNs, cutNs int64, tiers []Tier, holes []span) []piece {
	if fromNs >= toNs {
		return nil
	}
	if len(tiers) == 0 {
		return []piece{{nil, fromNs, toNs}}
	}
	step, rest := tiers[0].Step*1e9, tiers[1:]
	a := (fromNs + step - 1) / step * step
	b := min(toNs, cutNs) / step * step
	if a >= b {
		return cover(fromNs, toNs, cutNs, rest, holes)
	}
	for _, h := range holes {
		hs, he := max(a, h.from/step*step), min(b, (h.to+step-1)/step*step)
		if hs >= he {
			continue
		}
		out := cover(fromNs, a, cutNs, rest, holes)
		if a < hs {
			out = append(out, piece{&tiers[0], a, hs})
		}
		out = append(out, cover(hs, he, cutNs, rest, holes)...)
		return append(out, cover(he, toNs, cutNs, tiers, holes)...)
	}
	out := cover(fromNs, a, cutNs, rest, holes)
	out = append(out, piece{&tiers[0], a, b})
	return append(out, cover(b, toNs, cutNs, rest, holes)...)
}

// maxHoles bounds the pieces of a series: more minutes with marks not done
// than this in its range are read from the readings in one span.
const maxHoles = 16

// pending returns the minutes of entity input in [fromNs, toNs) with marks
// the rollup has not done (made after rolledNs), as sorted spans.
func (s *Store) pending(ctx context.Context, entity, input string, fromNs, toNs, rolledNs int64) ([]span, error) {
	minutes, err := collect(ctx, s.reads, "read rollup marks", "scan rollup mark",
		"SELECT DISTINCT minute FROM "+s.db+".rollup_dirty WHERE marked_ns > ? AND entity = ? AND input = ? AND minute >= ? AND minute < ? ORDER BY minute",
		[]any{rolledNs, entity, input, fromNs/1e9 - 60, toNs / 1e9}, func(scan func(...any) error) (m int64, err error) {
			err = scan(&m)
			return m, err
		})
	if err != nil || len(minutes) == 0 {
		return nil, err
	}
	if len(minutes) > maxHoles {
		return []span{{minutes[0] * 1e9, (minutes[len(minutes)-1] + 60) * 1e9}}, nil
	}
	holes := make([]span, len(minutes))
	for i, m := range minutes {
		holes[i] = span{m * 1e9, (m + 60) * 1e9}
	}
	return holes, nil
}

// tiersFor are the tiers whose buckets nest in buckets of stepMs, coarsest
// first.
func tiersFor(stepMs int64) []Tier {
	var out []Tier
	for i := len(Tiers) - 1; i >= 0; i-- {
		if stepMs%(Tiers[i].Step*1000) == 0 {
			out = append(out, Tiers[i])
		}
	}
	return out
}

// partial is a bucket's share from one piece.
type partial struct {
	b                       int64
	readings, numbers       uint64
	min, max                *float64
	sum                     float64
	lastNs, lastReceivedNs  int64
	lastEventID, lastDevice string
	last                    string
	lastBytes               uint64
}

// later reports whether p's latest reading comes after q's.
func (p *partial) later(q *partial) bool {
	return cmp.Or(cmp.Compare(p.lastNs, q.lastNs), cmp.Compare(p.lastReceivedNs, q.lastReceivedNs),
		strings.Compare(p.lastEventID, q.lastEventID), strings.Compare(p.lastDevice, q.lastDevice)) > 0
}

func (p *partial) add(q *partial) {
	p.readings += q.readings
	p.numbers += q.numbers
	p.sum += q.sum
	if q.min != nil && (p.min == nil || *q.min < *p.min) {
		p.min = q.min
	}
	if q.max != nil && (p.max == nil || *q.max > *p.max) {
		p.max = q.max
	}
	if q.lastNs > p.lastNs {
		p.lastNs, p.last, p.lastBytes = q.lastNs, q.last, q.lastBytes
	}
}

// SeriesBuckets aggregates an entity input's readings with reading times in
// [fromMs, toMs] into buckets of stepMs, oldest first; empty buckets are
// left out. Count is the number of distinct readings (a duplicate that
// ReplacingMergeTree has not folded yet counts once); Min, Max and Avg
// cover the numbers and booleans, Last is the value with the greatest
// reading time (then receive time, then the hash of its event id and device input). From the
// readings, Avg may weigh such an unfolded duplicate twice until the merge;
// from a rollup it never does. Each bucket's Last has an even share of
// budget; one over it is left out, with its size (LastBytes).
func (s *Store) SeriesBuckets(ctx context.Context, entity, input string, fromMs, toMs, stepMs int64, budget int) ([]query.Bucket, error) {
	fromNs, toNs, rolled := fromMs*1e6, (toMs+1)*1e6, s.rolled.Load()
	var holes []span
	tiers := tiersFor(stepMs)
	if cut := rolled - 2*int64(RollupLag); len(tiers) > 0 && cut > fromNs {
		var err error
		if holes, err = s.pending(ctx, entity, input, fromNs, min(toNs, cut), rolled); err != nil {
			return nil, err
		}
	}
	pieces := cover(fromNs, toNs, rolled-2*int64(RollupLag), tiers, holes)
	lastShare := share(budget, query.BucketCount(fromMs, toMs, stepMs))
	var selects []string
	var args []any
	for _, p := range pieces {
		if p.tier == nil {
			selects = append(selects, "SELECT toInt64(intDiv(ts_ns, "+strconv.FormatInt(stepMs*1e6, 10)+")) AS b, uniqExact(cityHash64(event_id, device_input)), count(value_num), "+
				"min(value_num), max(value_num), toFloat64(ifNull(sum(value_num), 0)), max(ts_ns), "+capped("argMax(value_json, "+latestKey+")", lastShare)+" "+
				"FROM "+s.db+".input_values WHERE entity = ? AND input = ? AND ts_ns >= ? AND ts_ns < ? GROUP BY b")
			args = append(args, entity, input, p.fromNs, p.toNs)
			continue
		}
		selects = append(selects, "SELECT toInt64(intDiv(bucket, "+strconv.FormatInt(stepMs/1000, 10)+")) AS b, sum(readings), sum(numbers), min(min_value), max(max_value), "+
			"toFloat64(sum(sum_value)), max(last_ns), "+capped("argMax(last_value, last_ns)", lastShare)+" FROM ("+latestOf(s.db, *p.tier, "entity = ? AND input = ? AND bucket >= ? AND bucket < ?")+") GROUP BY b")
		args = append(args, entity, input, p.fromNs/1e9, p.toNs/1e9)
	}
	if len(selects) == 0 {
		return nil, nil
	}
	parts, err := collect(ctx, s.reads, "query buckets", "scan bucket", strings.Join(selects, " UNION ALL "), args,
		func(scan func(...any) error) (p partial, err error) {
			err = scan(&p.b, &p.readings, &p.numbers, &p.min, &p.max, &p.sum, &p.lastNs, &p.last, &p.lastBytes)
			return p, err
		})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(parts, func(x, y partial) int { return cmp.Compare(x.b, y.b) })
	var out []query.Bucket
	for i := 0; i < len(parts); {
		p := parts[i]
		for i++; i < len(parts) && parts[i].b == p.b; i++ {
			p.add(&parts[i])
		}
		b := query.Bucket{TS: msTime(p.b * stepMs), Count: p.readings, Min: p.min, Max: p.max}
		b.Last, b.LastBytes = cutValue(p.last, p.lastBytes)
		if p.numbers > 0 {
			avg := p.sum / float64(p.numbers)
			b.Avg = &avg
		}
		out = append(out, b)
	}
	return out, nil
}
