package chstore

import (
	"context"

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
	return collect(ctx, s.pipe, "look up event keys", "scan event key",
		"SELECT event_id, ts_ns, outcome FROM "+s.db+".event_keys WHERE event_id IN ? AND ts_ns >= ?",
		[]any{set(ids), sinceNs}, func(scan func(...any) error) (k KeyRow, err error) {
			var code uint8
			err = scan(&k.EventID, &k.TsNs, &code)
			k.Outcome = outcome.Code(code)
			return k, err
		})
}

// EachKey calls fn with the id and time of every row of event_keys answered
// at or after sinceNs, as the rows stream in (writer-worker's filter of
// keys seen is filled from them at start).
func (s *Store) EachKey(ctx context.Context, sinceNs int64, fn func(id string, tsNs int64)) error {
	return scanRows(ctx, s.pipe, "read event keys", "scan event key",
		"SELECT event_id, ts_ns FROM "+s.db+".event_keys WHERE ts_ns >= ?", []any{sinceNs},
		func(scan func(...any) error) error {
			var id string
			var ts int64
			if err := scan(&id, &ts); err != nil {
				return err
			}
			fn(id, ts)
			return nil
		})
}
