package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

// randomReadings are n readings of entity e input i spread over span from
// start: mostly numbers, some booleans and strings, some sharing a reading
// time (and a receive time: "last" must break the tie the same way).
func randomReadings(r *rand.Rand, start time.Time, span time.Duration, n int, tag string) []ValueRow {
	rows := make([]ValueRow, 0, n)
	for k := range n {
		ts := start.Add(time.Duration(r.Int64N(int64(span)))).UnixNano()
		if k > 0 && r.IntN(10) == 0 {
			ts = rows[k-1].TsNs
		}
		var v string
		switch r.IntN(20) {
		case 0:
			v = "true"
		case 1:
			v = `"text"`
		default:
			v = strconv.FormatFloat(math.Round(r.NormFloat64()*1000)/100, 'f', -1, 64)
		}
		rows = append(rows, ValueRow{Entity: "e", Input: "i", TsNs: ts, ReceivedNs: ts + 1e9, Serial: "s", DeviceInput: "i",
			EventID: fmt.Sprintf("%s-%d", tag, k), JSON: json.RawMessage(v)})
	}
	return rows
}

// sameBuckets compares a series read from the rollups with one read from
// the readings: counts, min, max and last exactly, avg within rounding.
func sameBuckets(t *testing.T, what string, got, want []query.Bucket) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d buckets from the rollups, %d from the readings", what, len(got), len(want))
	}
	eq := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	for k := range got {
		g, w := got[k], want[k]
		avgOK := (g.Avg == nil) == (w.Avg == nil) && (g.Avg == nil || math.Abs(*g.Avg-*w.Avg) <= 1e-9*math.Max(1, math.Abs(*w.Avg)))
		if g.TS != w.TS || g.Count != w.Count || !eq(g.Min, w.Min) || !eq(g.Max, w.Max) || string(g.Last) != string(w.Last) || !avgOK {
			t.Fatalf("%s: bucket %d from the rollups %+v, from the readings %+v", what, k, g, w)
		}
	}
}

// Rollups answer as the readings do on random ranges and steps, after
// duplicates (a replay stored twice before the merge) and late readings
// that land in buckets already rolled up.
func TestRollupEqualsRaw(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	// Readings up to now: the newest are past the rollups' end.
	start := time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Hour)
	length := time.Since(start)
	first := randomReadings(r, start, length, 20000, "a")
	var rolledAt int64
	rollup := func(rows []ValueRow, run bool) {
		t.Helper()
		at := time.Now().UnixNano()
		if err := s.InsertValues(ctx, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.InsertMarks(ctx, at, MarksOf(rows)); err != nil {
			t.Fatal(err)
		}
		if run {
			if err := s.Rollup(ctx, rolledAt, at, 0, time.Now().UnixNano()); err != nil {
				t.Fatal(err)
			}
			rolledAt = at
		}
	}
	rollup(first, false)
	rollup(first[:500], true) // stored twice: a replay before the merge
	// Late readings into the same hours, rolled up again; then more that
	// the rollup has not done (their minutes are read from the readings).
	rollup(randomReadings(r, start, length, 3000, "b"), true)
	rollup(randomReadings(r, start, length, 10, "c"), false)
	s.SetRolledUp(rolledAt)

	// The readings' count is exact before the merge; their avg weighs the
	// duplicates until it: merge them for the comparison.
	buckets, err := s.SeriesBuckets(ctx, "e", "i", start.UnixMilli(), time.Now().Add(time.Hour).UnixMilli(), 86400e3, query.MaxBytes)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, b := range buckets {
		n += b.Count
	}
	if n != 23010 {
		t.Fatalf("the series counts %d readings, want 23010 (the 500 duplicates once)", n)
	}
	if err := s.pipe.conn().Exec(ctx, "OPTIMIZE TABLE "+s.db+".input_values FINAL"); err != nil {
		t.Fatal(err)
	}
	steps := []int64{60e3, 5 * 60e3, 3600e3, 3 * 3600e3, 86400e3, 90e3, 45e3}
	for k := range 60 {
		stepMs := steps[r.IntN(len(steps))]
		from := start.Add(-time.Hour + time.Duration(r.Int64N(int64(74*time.Hour)))).UnixMilli()
		to := from + r.Int64N(int64(74*time.Hour/time.Millisecond))
		what := fmt.Sprintf("range %d [%d, %d] step %d", k, from, to, stepMs)
		s.SetRolledUp(0)
		want, err := s.SeriesBuckets(ctx, "e", "i", from, to, stepMs, query.MaxBytes)
		if err != nil {
			t.Fatal(err)
		}
		s.SetRolledUp(rolledAt)
		got, err := s.SeriesBuckets(ctx, "e", "i", from, to, stepMs, query.MaxBytes)
		if err != nil {
			t.Fatal(err)
		}
		sameBuckets(t, what, got, want)
	}
	// The pieces of a one-year range: hours inside, minutes and readings
	// only at the ragged ends.
	now := time.Date(2026, 6, 1, 12, 34, 56, 0, time.UTC).UnixNano()
	p := cover(now-int64(365*24*time.Hour)+int64(1500*time.Millisecond), now, now, tiersFor(6*3600e3), nil)
	if len(p) != 5 || p[0].tier != nil || p[1].tier.Table != "input_minutes" || p[2].tier.Table != "input_hours" || p[3].tier.Table != "input_minutes" || p[4].tier != nil {
		t.Fatalf("pieces %+v", p)
	}
	// A minute with marks not done, in the middle: its hour is read from
	// the minutes, the minute itself from the readings.
	hole := span{now - int64(100*24*time.Hour) + 120e9, now - int64(100*24*time.Hour) + 180e9}
	p = cover(now-int64(365*24*time.Hour), now, now, tiersFor(3600e3), []span{hole})
	var tables []string
	for _, x := range p {
		name := "raw"
		if x.tier != nil {
			name = x.tier.Table
		}
		tables = append(tables, name)
		if x.tier != nil && x.fromNs < hole.to && x.toNs > hole.from {
			t.Fatalf("piece %+v reads a rollup over the minute with marks not done", x)
		}
	}
	if got := fmt.Sprint(tables); got != "[raw input_minutes input_hours input_minutes raw input_minutes input_hours input_minutes raw]" {
		t.Fatalf("pieces around a minute not done: %s", got)
	}
}
