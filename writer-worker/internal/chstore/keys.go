package chstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// KeyRow is one row of event_keys: the final outcome of a keyed event.
type KeyRow struct {
	EventID string
	TsNs    int64
	Outcome outcome.Code
}

// InsertKeys writes rows in one INSERT.
func (s *Store) InsertKeys(ctx context.Context, rows []KeyRow) error {
	return s.insert(ctx, "event_keys", "event_id, ts_ns, outcome", len(rows), 3, func(i int, a []any) {
		a[0], a[1], a[2] = rows[i].EventID, rows[i].TsNs, uint8(rows[i].Outcome)
	})
}

// KeyOutcomes returns the rows of those of ids answered at or after
// sinceNs: an event may have two (a dead letter's and its replay's).
func (s *Store) KeyOutcomes(ctx context.Context, ids []string, sinceNs int64) ([]KeyRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	return collect(ctx, s.conn, "look up event keys", "scan event key",
		"SELECT event_id, ts_ns, outcome FROM "+s.db+".event_keys WHERE event_id IN ? AND ts_ns >= ?",
		[]any{set(ids), sinceNs}, func(scan func(...any) error) (k KeyRow, err error) {
			var code uint8
			err = scan(&k.EventID, &k.TsNs, &code)
			k.Outcome = outcome.Code(code)
			return k, err
		})
}

// DropExpiredKeys drops the days of event_keys that end before cutoff and
// returns how many it dropped.
func (s *Store) DropExpiredKeys(ctx context.Context, cutoff time.Time) (int, error) {
	days, err := collect(ctx, s.conn, "list event key partitions", "scan partition",
		"SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = 'event_keys' AND active",
		[]any{s.db}, func(scan func(...any) error) (p string, err error) {
			err = scan(&p)
			return p, err
		})
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, p := range days {
		day, err := time.Parse("20060102", p)
		if err != nil || !day.AddDate(0, 0, 1).Before(cutoff) {
			continue
		}
		// p is eight digits (it parsed as a date): safe to splice.
		n, _ := strconv.Atoi(p)
		if err := s.conn.Exec(ctx, "ALTER TABLE "+s.db+".event_keys DROP PARTITION "+strconv.Itoa(n)); err != nil {
			return dropped, fmt.Errorf("drop event key day %s: %w", p, err)
		}
		dropped++
	}
	return dropped, nil
}
