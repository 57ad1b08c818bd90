package chstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
)

// Reading times are after 1970 (ingest-api bounds them), so buckets are
// plain integer divisions in Go and in ClickHouse alike.

// Mark is one minute of an entity input that readings were stored in: its
// rollups are to be computed again (rollup_dirty).
type Mark struct {
	Entity, Input string
	Minute        int64 // start, Unix seconds
}

// Tier is a rollup table and its bucket width in seconds.
type Tier struct {
	Table string
	Step  int64
}

// The rollup tiers, finest first.
var (
	Minutes = Tier{"input_minutes", 60}
	Hours   = Tier{"input_hours", 3600}
	Tiers   = []Tier{Minutes, Hours}
)

// MarksOf returns the distinct minutes that rows touch.
func MarksOf(rows []ValueRow) []Mark {
	seen := make(map[Mark]struct{}, len(rows))
	var out []Mark
	for i := range rows {
		m := Mark{rows[i].Entity, rows[i].Input, rows[i].TsNs / 60e9 * 60}
		if _, ok := seen[m]; !ok {
			seen[m] = struct{}{}
			out = append(out, m)
		}
	}
	return out
}

// InsertMarks writes marks, marked at markedNs, in one INSERT.
func (s *Store) InsertMarks(ctx context.Context, markedNs int64, marks []Mark) error {
	return s.insert(ctx, "rollup_dirty", "marked_ns, entity, input, minute", len(marks), 4, func(i int, a []any) {
		a[0], a[1], a[2], a[3] = markedNs, marks[i].Entity, marks[i].Input, marks[i].Minute
	})
}

// MarksBetween returns the distinct marks made in (fromNs, toNs], about
// limit of them in order of marking, and the time up to which it returned
// all (toNs when there were no more than limit). Marks made at one time
// (one insert) come together, however many.
func (s *Store) MarksBetween(ctx context.Context, fromNs, toNs int64, limit int) ([]Mark, int64, error) {
	type row struct {
		m  Mark
		at int64
	}
	read := func(fromNs, toNs int64, limit int) ([]row, error) {
		return collect(ctx, s.conn, "read rollup marks", "scan rollup mark",
			"SELECT entity, input, minute, max(marked_ns) AS at FROM "+s.db+".rollup_dirty WHERE marked_ns > ? AND marked_ns <= ? GROUP BY entity, input, minute ORDER BY at LIMIT ?",
			[]any{fromNs, toNs, limit}, func(scan func(...any) error) (r row, err error) {
				err = scan(&r.m.Entity, &r.m.Input, &r.m.Minute, &r.at)
				return r, err
			})
	}
	rows, err := read(fromNs, toNs, limit+1)
	if err != nil {
		return nil, 0, err
	}
	upTo := toNs
	if len(rows) > limit {
		// The marks made at the first time not read whole are read again
		// next time; when that is the first time read, all of its are
		// read now.
		cut := rows[limit].at
		if upTo = cut - 1; cut == rows[0].at {
			if rows, err = read(cut-1, cut, math.MaxInt32); err != nil {
				return nil, 0, err
			}
			upTo = cut
		}
		for len(rows) > 0 && rows[len(rows)-1].at > upTo {
			rows = rows[:len(rows)-1]
		}
	}
	marks := make([]Mark, len(rows))
	for i, r := range rows {
		marks[i] = r.m
	}
	return marks, upTo, nil
}

// The columns of a tier row, and how rows of a finer level fold into one.
const (
	tierColumns = "entity, input, bucket, readings, numbers, min_value, max_value, sum_value, last_ns, last_received_ns, last_event_id, last_device_input, last_value, version"
	// latest orders readings: reading time, then receive time, then
	// identity, so that "last" is one reading however ties fall.
	latest = "(last_ns, last_received_ns, last_event_id, last_device_input)"
)

// rawFold is the readings of input_values as tier rows of one reading each,
// a duplicate not folded yet by ReplacingMergeTree counted once.
func rawFold(db, where string) string {
	return "SELECT entity, input, ts_ns AS last_ns, any(received_ns) AS last_received_ns, event_id AS last_event_id, device_input AS last_device_input, " +
		"any(value_json) AS last_value, any(value_num) AS v FROM " + db + ".input_values WHERE " + where +
		" GROUP BY entity, input, ts_ns, event_id, device_input"
}

// latestOf is each bucket's newest computation of a tier: merges may not
// have folded the older ones yet.
func latestOf(db string, t Tier, where string) string {
	return "SELECT entity, input, bucket, argMax(readings, version) AS readings, argMax(numbers, version) AS numbers, " +
		"argMax(min_value, version) AS min_value, argMax(max_value, version) AS max_value, argMax(sum_value, version) AS sum_value, " +
		"argMax(last_ns, version) AS last_ns, argMax(last_received_ns, version) AS last_received_ns, argMax(last_event_id, version) AS last_event_id, " +
		"argMax(last_device_input, version) AS last_device_input, argMax(last_value, version) AS last_value FROM " + db + "." + t.Table +
		" WHERE " + where + " GROUP BY entity, input, bucket"
}

// Rollup computes again the minutes marks name, and the hours they lie in,
// from the readings below them, with version versionNs: a bucket's newest
// computation is what it holds.
func (s *Store) Rollup(ctx context.Context, marks []Mark, versionNs int64) error {
	if len(marks) == 0 {
		return nil
	}
	entities := map[string]struct{}{}
	var minutes, hours []string
	seenHour := map[string]struct{}{}
	lo, hi := marks[0].Minute, marks[0].Minute
	for _, m := range marks {
		entities[m.Entity] = struct{}{}
		minutes = append(minutes, m.Entity+"\x00"+m.Input+"\x00"+strconv.FormatInt(m.Minute, 10))
		h := m.Entity + "\x00" + m.Input + "\x00" + strconv.FormatInt(m.Minute/3600*3600, 10)
		if _, ok := seenHour[h]; !ok {
			seenHour[h] = struct{}{}
			hours = append(hours, h)
		}
		lo, hi = min(lo, m.Minute), max(hi, m.Minute)
	}
	ents := make([]string, 0, len(entities))
	for e := range entities {
		ents = append(ents, e)
	}
	hourLo, hourHi := lo/3600*3600, hi/3600*3600+3600
	// Minutes from the readings: only the marked ones, within the
	// entities and time span of the marks (the primary key bounds the scan).
	raw := rawFold(s.db, "entity IN ? AND ts_ns >= ? AND ts_ns < ? AND "+
		"concat(entity, '\\0', input, '\\0', toString(intDiv(ts_ns, 60000000000) * 60)) IN ?")
	if err := s.fold(ctx, Minutes, raw, "v", []any{set(ents), lo * 1e9, (hi + 60) * 1e9, set(minutes)}, versionNs); err != nil {
		return err
	}
	// Hours from the minutes just computed.
	fine := latestOf(s.db, Minutes, "entity IN ? AND bucket >= ? AND bucket < ? AND "+
		"concat(entity, '\\0', input, '\\0', toString(intDiv(bucket, 3600) * 3600)) IN ?")
	return s.fold(ctx, Hours, fine, "", []any{set(ents), hourLo, hourHi, set(hours)}, versionNs)
}

// fold inserts into tier t the buckets of the rows of from (tier rows, or
// readings with their number in column v when v is set).
func (s *Store) fold(ctx context.Context, t Tier, from, v string, args []any, versionNs int64) error {
	step := strconv.FormatInt(t.Step, 10)
	bucket := "intDiv(last_ns, " + step + "000000000) * " + step
	agg := "count(), count(v), min(v), max(v), ifNull(sum(v), 0)"
	if v == "" {
		bucket = "intDiv(bucket, " + step + ") * " + step
		agg = "sum(readings), sum(numbers), min(min_value), max(max_value), sum(sum_value)"
	}
	q := "INSERT INTO " + s.db + "." + t.Table + " (" + tierColumns + ") SELECT entity, input, " + bucket + " AS b, " + agg +
		", max(last_ns), argMax(last_received_ns, " + latest + "), argMax(last_event_id, " + latest + "), argMax(last_device_input, " + latest +
		"), argMax(last_value, " + latest + "), " + strconv.FormatInt(versionNs, 10) + " FROM (" + from + ") GROUP BY entity, input, b"
	if err := s.conn.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("roll up %s: %w", t.Table, classify(err))
	}
	return nil
}

// RollupAll computes the rollups of every reading stored, a day of reading
// time at a time: the first rollup of a deployment that has readings from
// before marks were made.
func (s *Store) RollupAll(ctx context.Context, versionNs int64) error {
	days, err := collect(ctx, s.conn, "list days of readings", "scan day",
		"SELECT DISTINCT toInt64(intDiv(ts_ns, 86400000000000)) AS d FROM "+s.db+".input_values ORDER BY d", nil,
		func(scan func(...any) error) (d int64, err error) {
			err = scan(&d)
			return d, err
		})
	if err != nil {
		return err
	}
	for _, d := range days {
		from, to := d*86400, (d+1)*86400
		if err := s.fold(ctx, Minutes, rawFold(s.db, "ts_ns >= ? AND ts_ns < ?"), "v", []any{from * 1e9, to * 1e9}, versionNs); err != nil {
			return err
		}
		if err := s.fold(ctx, Hours, latestOf(s.db, Minutes, "bucket >= ? AND bucket < ?"), "", []any{from, to}, versionNs); err != nil {
			return err
		}
	}
	return nil
}
