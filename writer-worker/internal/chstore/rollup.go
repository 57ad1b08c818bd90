package chstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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

// MarkOf is the mark of a reading of entity input at readingNs.
func MarkOf(entity, input string, readingNs int64) Mark {
	return Mark{Entity: entity, Input: input, Minute: readingNs / 60e9 * 60}
}

// MarksOf returns the distinct minutes that rows touch.
func MarksOf(rows []ValueRow) []Mark {
	seen := make(map[Mark]struct{}, len(rows))
	var out []Mark
	for i := range rows {
		m := MarkOf(rows[i].Entity, rows[i].Input, rows[i].TsNs)
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

// The columns of a tier row, and how rows of a finer level fold into one.
const (
	tierColumns = "entity, input, bucket, readings, numbers, min_value, max_value, sum_value, last_ns, last_value, version"
	// latestKey orders readings: reading time, then receive time, then
	// identity, so that "last" is one reading however ties fall; the
	// series query orders them the same way. Two buckets never share a
	// reading time: rows of a finer tier are ordered by it alone.
	latestKey = "(ts_ns, received_ns, cityHash64(event_id, device_input))"
)

// rawFold is the readings of input_values, a duplicate not folded yet by
// ReplacingMergeTree once, with the key latestKey orders them by in column k.
func rawFold(db, where string) string {
	return "SELECT entity, input, ts_ns AS last_ns, (ts_ns, any(received_ns), cityHash64(event_id, device_input)) AS k, " +
		"any(value_json) AS last_value, any(value_num) AS v FROM " + db + ".input_values WHERE " + where +
		" GROUP BY entity, input, ts_ns, event_id, device_input"
}

// latestOf is each bucket's newest computation of a tier: merges may not
// have folded the older ones yet.
func latestOf(db string, t Tier, where string) string {
	return "SELECT entity, input, bucket, argMax(readings, version) AS readings, argMax(numbers, version) AS numbers, " +
		"argMax(min_value, version) AS min_value, argMax(max_value, version) AS max_value, argMax(sum_value, version) AS sum_value, " +
		"argMax(last_ns, version) AS last_ns, argMax(last_value, version) AS last_value FROM " + db + "." + t.Table +
		" WHERE " + where + " GROUP BY entity, input, bucket"
}

// Rollup computes again the minutes marked in (fromNs, toNs], and the
// hours they lie in, in one chunk of any size: RollupChunk without bounds.
func (s *Store) Rollup(ctx context.Context, fromNs, toNs, sinceMinute, versionNs int64) error {
	return s.RollupChunk(ctx, Chunk{FromNs: fromNs, ToNs: toNs}, sinceMinute, versionNs, 0)
}

// RollupChunk computes again the minutes c marks, and the hours they lie
// in, from the readings below them, with version versionNs: a bucket's
// newest computation is what it holds. The marks are read by ClickHouse
// itself (GLOBAL IN: once, also behind Distributed tables); their entities,
// inputs and span of minutes bound the scan by the primary key. Each of
// its two queries reads at most maxRows rows, the marks' included (0: no
// bound), or fails before it reads any (TooBig).
//
// Minutes before sinceMinute (Unix s) are left out: their readings' month
// is past retention, dropped or about to be, and a bucket computed again
// from what is left would lose the readings the rollup still counts.
func (s *Store) RollupChunk(ctx context.Context, c Chunk, sinceMinute, versionNs int64, maxRows uint64) error {
	var lo, hi int64
	var n uint64
	var e0, e1, i0, i1 string
	marked, m := c.marked(s.db, sinceMinute)
	if err := s.pipe.conn().QueryRow(ctx, "SELECT min(minute), max(minute), count(), min(entity), max(entity), min(input), max(input) "+marked, m...).
		Scan(&lo, &hi, &n, &e0, &e1, &i0, &i1); err != nil {
		return fmt.Errorf("read rollup marks: %w", classify(err))
	}
	if n == 0 {
		return nil
	}
	ctx = readLimit(ctx, maxRows)
	// The marks' ranges of entities and inputs, as values: ClickHouse 18.16
	// bounds a scan by the primary key with them, not with GLOBAL IN sets.
	keys := "entity >= ? AND entity <= ? AND input >= ? AND input <= ? AND entity GLOBAL IN (SELECT entity " + marked + ")"
	k := join([]any{e0, e1, i0, i1}, m)
	raw := rawFold(s.db, keys+" AND ts_ns >= ? AND ts_ns < ? AND (entity, input, intDiv(ts_ns, 60000000000) * 60) GLOBAL IN (SELECT entity, input, minute "+marked+")")
	if err := s.fold(ctx, Minutes, raw, "v", join(k, []any{lo * 1e9, (hi + 60) * 1e9}, m), versionNs); err != nil {
		return err
	}
	fine := latestOf(s.db, Minutes, keys+" AND bucket >= ? AND bucket < ? AND "+
		"(entity, input, intDiv(bucket, 3600) * 3600) GLOBAL IN (SELECT entity, input, intDiv(minute, 3600) * 3600 "+marked+")")
	return s.fold(ctx, Hours, fine, "", join(k, []any{lo / 3600 * 3600, hi/3600*3600 + 3600}, m), versionNs)
}

// join is the arguments of a query's placeholders, part after part.
func join(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// fold inserts into tier t the buckets of the rows of from (tier rows, or
// readings with their number in column v when v is set).
func (s *Store) fold(ctx context.Context, t Tier, from, v string, args []any, versionNs int64) error {
	step := strconv.FormatInt(t.Step, 10)
	bucket := "intDiv(last_ns, " + step + "000000000) * " + step
	agg := "count(), count(v), min(v), max(v), ifNull(sum(v), 0), max(last_ns), argMax(last_value, k)"
	if v == "" {
		bucket = "intDiv(bucket, " + step + ") * " + step
		agg = "sum(readings), sum(numbers), min(min_value), max(max_value), sum(sum_value), max(last_ns), argMax(last_value, last_ns)"
	}
	q := "INSERT INTO " + s.db + "." + t.Table + " (" + tierColumns + ") SELECT entity, input, " + bucket + " AS b, " + agg +
		", " + strconv.FormatInt(versionNs, 10) + " FROM (" + from + ") GROUP BY entity, input, b"
	err := s.pipe.use(func(c driver.Conn) error { return c.Exec(ctx, q, args...) })
	if err != nil {
		return fmt.Errorf("roll up %s: %w", t.Table, classify(err))
	}
	return nil
}

// RollupAll computes the rollups of every reading stored, a day of reading
// time at a time, calling each after every day: the first rollup of a
// deployment that has readings from before marks were made.
func (s *Store) RollupAll(ctx context.Context, versionNs int64, each func() error) error {
	days, err := collect(ctx, s.pipe, "list days of readings", "scan day",
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
		if err := each(); err != nil {
			return err
		}
	}
	return nil
}
