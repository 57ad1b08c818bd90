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

// KeyOutcomes returns the recorded outcomes of those of ids answered at or
// after sinceNs.
func (s *Store) KeyOutcomes(ctx context.Context, ids []string, sinceNs int64) (map[string]outcome.Code, error) {
	found := make(map[string]outcome.Code)
	if len(ids) == 0 {
		return found, nil
	}
	rows, err := s.conn.Query(ctx, "SELECT event_id, outcome FROM "+s.db+".event_keys WHERE event_id IN ? AND ts_ns >= ?", set(ids), sinceNs)
	if err != nil {
		return nil, fmt.Errorf("look up event keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var code uint8
		if err := rows.Scan(&id, &code); err != nil {
			return nil, fmt.Errorf("scan event key: %w", err)
		}
		// A dead letter's "failed to store" gives way to the outcome of
		// its replay, whichever row comes first.
		if prev, ok := found[id]; ok && prev != outcome.StorageFailed {
			continue
		}
		found[id] = outcome.Code(code)
	}
	return found, rows.Err()
}

// DropExpiredKeys drops the days of event_keys that end before cutoff and
// returns how many it dropped.
func (s *Store) DropExpiredKeys(ctx context.Context, cutoff time.Time) (int, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = 'event_keys' AND active", s.db)
	if err != nil {
		return 0, fmt.Errorf("list event key partitions: %w", err)
	}
	var days []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return 0, fmt.Errorf("scan partition: %w", err)
		}
		days = append(days, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("list event key partitions: %w", err)
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
