package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

func TestPageCut(t *testing.T) {
	const row = query.RowBytes
	for _, tc := range []struct {
		name   string
		ms     []int64
		size   []int
		limit  int
		budget int
		rows   int
		next   int64
	}{
		{"all fit", []int64{1, 2, 3}, []int{10, 10, 10}, 5, 1000, 3, 0},
		{"limit, one more", []int64{1, 2, 3}, []int{10, 10, 10}, 2, 1000, 2, 3},
		{"bytes", []int64{1, 2, 3, 4}, []int{300, 300, 300, 300}, 10, 2 * (300 + row), 2, 3},
		{"ends between milliseconds", []int64{1, 2, 2, 3}, []int{300, 300, 300, 300}, 10, 2 * (300 + row), 1, 2},
		{"first millisecond over the budget", []int64{5, 5, 5, 6}, []int{300, 300, 300, 1}, 10, 2 * (300 + row), 2, 6},
		{"one value over the budget", []int64{5, 6}, []int{5000, 1}, 10, 1000, 1, 6},
	} {
		rows, next := pageCut(tc.ms, tc.size, tc.limit, tc.budget)
		if rows != tc.rows || next != tc.next {
			t.Errorf("%s: pageCut = %d rows, next %d; want %d, %d", tc.name, rows, next, tc.rows, tc.next)
		}
	}
}

// Values over an answer's share are left out and named by their size; a
// series is paged by bytes, each value once.
func TestReadsCutLargeValues(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	big := json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)
	var rows []ValueRow
	for i := range 6 {
		rows = append(rows, ValueRow{Entity: "e", Input: "big", TsNs: base + int64(i)*1e6, Serial: "d", DeviceInput: "b", EventID: fmt.Sprint("b", i), JSON: big})
	}
	rows = append(rows, ValueRow{Entity: "e", Input: "small", TsNs: base, Serial: "d", DeviceInput: "s", EventID: "s0", JSON: json.RawMessage(`1`)})
	if err := s.InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	budget := 2 * (len(big) + 1 + query.RowBytes) // two values a page
	var got []string
	for from, pages := base/1e6, 0; from > 0; pages++ {
		pts, next, err := s.Series(ctx, "e", "big", from, base/1e6+10, 100, budget)
		if err != nil || len(pts) > 2 || pages > 6 {
			t.Fatalf("page from %d: %d points, %v", from, len(pts), err)
		}
		for _, p := range pts {
			got = append(got, p.TS)
		}
		from = next
	}
	if len(got) != 6 || got[0] != "2026-03-01T12:00:00.000Z" || got[5] != "2026-03-01T12:00:00.005Z" {
		t.Errorf("pages held %v, want the six values once", got)
	}
	pts, err := s.LatestOf(ctx, []query.EntityInput{{Entity: "e", Input: "big"}, {Entity: "e", Input: "small"}}, 1000)
	if err != nil || len(pts) != 2 {
		t.Fatal(pts, err)
	}
	for _, p := range pts {
		if p.Input == "big" && (p.Value != nil || p.ValueBytes != len(big)) || p.Input == "small" && string(p.Value) != "1" {
			t.Errorf("latest of %s: %s (%d bytes left out)", p.Input, p.Value, p.ValueBytes)
		}
	}
	bs, err := s.SeriesBuckets(ctx, "e", "big", base/1e6, base/1e6+5, 1, 3000)
	if err != nil || len(bs) != 6 || bs[0].Last != nil || bs[0].LastBytes != len(big) {
		t.Errorf("buckets %+v, %v: want the last values left out", bs, err)
	}
}
