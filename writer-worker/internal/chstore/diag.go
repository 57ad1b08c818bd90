package chstore

import (
	"context"

	"github.com/devicehub/eventservice/pkg/diag"
)

// InsertDiag writes diagnostics reports (pkg/diag): one INSERT per table
// that has rows, in order, from the from-th table on. It returns how many
// tables are written: a caller that retries after a failure passes that
// on, so that no table gets a report's rows twice.
func (s *Store) InsertDiag(ctx context.Context, reports []diag.Report, from int) (int, error) {
	var counts []diagCount
	var seen []diag.Seen
	var rejections []diag.Rejection
	var keys []diag.Key
	for _, r := range reports {
		for _, c := range r.Counts {
			counts = append(counts, diagCount{r.Minute, c})
		}
		seen = append(seen, r.Seen...)
		rejections = append(rejections, r.Rejections...)
		keys = append(keys, r.Keys...)
	}
	stats := func(table, time string, div int64) func() error {
		return func() error {
			return s.insert(ctx, table, "serial, "+time+", kind, requests, readings", len(counts), 5, func(i int, a []any) {
				c := &counts[i]
				a[0], a[1], a[2], a[3], a[4] = c.Serial, c.minute/div*div, c.Kind, c.Requests, c.Readings
			})
		}
	}
	tables := []func() error{stats("device_stats", "minute", 60), stats("device_stats_hourly", "hour", 3600),
		func() error {
			return s.insert(ctx, "device_seen", "serial, last_ns, kind", len(seen), 3, func(i int, a []any) {
				a[0], a[1], a[2] = seen[i].Serial, seen[i].LastNs, seen[i].Kind
			})
		},
		func() error {
			return s.insert(ctx, "device_rejections", "serial, ts_ns, kind, message, error, source", len(rejections), 6, func(i int, a []any) {
				r := &rejections[i]
				a[0], a[1], a[2], a[3], a[4], a[5] = r.Serial, r.AtNs, r.Kind, r.Message, r.Error, r.Source
			})
		},
		func() error {
			return s.insert(ctx, "device_keys", "serial, key, ts_ns, count, value", len(keys), 5, func(i int, a []any) {
				k := &keys[i]
				a[0], a[1], a[2], a[3], a[4] = k.Serial, k.Key, k.LastNs, k.Count, k.LastValue
			})
		}}
	for i := from; i < len(tables); i++ {
		if err := tables[i](); err != nil {
			return i, err
		}
	}
	return len(tables), nil
}

type diagCount struct {
	minute int64
	diag.Count
}
