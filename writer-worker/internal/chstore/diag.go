package chstore

import (
	"context"

	"github.com/devicehub/eventservice/pkg/diag"
)

// InsertDiag writes diagnostics reports (pkg/diag): one INSERT per table
// that has rows.
func (s *Store) InsertDiag(ctx context.Context, reports []diag.Report) error {
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
	for _, t := range []struct{ table, time string }{{"device_stats", "minute"}, {"device_stats_hourly", "hour"}} {
		hourly := t.time == "hour"
		err := s.insert(ctx, t.table, "serial, "+t.time+", kind, requests, readings", len(counts), 5, func(i int, a []any) {
			c := &counts[i]
			at := c.minute
			if hourly {
				at = at / 3600 * 3600
			}
			a[0], a[1], a[2], a[3], a[4] = c.Serial, at, c.Kind, c.Requests, c.Readings
		})
		if err != nil {
			return err
		}
	}
	err := s.insert(ctx, "device_seen", "serial, last_ns, kind", len(seen), 3, func(i int, a []any) {
		a[0], a[1], a[2] = seen[i].Serial, seen[i].LastNs, seen[i].Kind
	})
	if err != nil {
		return err
	}
	err = s.insert(ctx, "device_rejections", "serial, ts_ns, kind, message, error, source", len(rejections), 6, func(i int, a []any) {
		r := &rejections[i]
		a[0], a[1], a[2], a[3], a[4], a[5] = r.Serial, r.AtNs, r.Kind, r.Message, r.Error, r.Source
	})
	if err != nil {
		return err
	}
	return s.insert(ctx, "device_keys", "serial, key, ts_ns, count, value", len(keys), 5, func(i int, a []any) {
		k := &keys[i]
		a[0], a[1], a[2], a[3], a[4] = k.Serial, k.Key, k.LastNs, k.Count, k.LastValue
	})
}

type diagCount struct {
	minute int64
	diag.Count
}
