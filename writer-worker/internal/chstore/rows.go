package chstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// ValueRow is one row of input_values.
type ValueRow struct {
	Entity, Input string
	TsNs          int64
	Serial        string
	DeviceInput   string
	EventID       string
	JSON          json.RawMessage
}

// MessageRow is one row of device_messages.
type MessageRow struct {
	Serial  string
	TsNs    int64
	EventID string
	Payload []byte
	Outcome string
}

// set renders a list as a ClickHouse tuple for IN, which 18.16 requires
// (a bound slice would be an Array).
func set(vs []string) clickhouse.GroupSet {
	g := clickhouse.GroupSet{Value: make([]any, len(vs))}
	for i, v := range vs {
		g.Value[i] = v
	}
	return g
}

// InsertValues writes rows in one INSERT.
func (s *Store) InsertValues(ctx context.Context, rows []ValueRow) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.db+".input_values (entity, input, ts_ns, serial, device_input, event_id, value_json)")
	if err != nil {
		return fmt.Errorf("prepare values insert: %w", err)
	}
	defer func() { _ = b.Abort() }()
	for i := range rows {
		r := &rows[i]
		if err := b.Append(r.Entity, r.Input, r.TsNs, r.Serial, r.DeviceInput, r.EventID, string(r.JSON)); err != nil {
			return fmt.Errorf("append value: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert values: %w", err)
	}
	return nil
}

// InsertMessages writes rows in one INSERT.
func (s *Store) InsertMessages(ctx context.Context, rows []MessageRow) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.db+".device_messages (serial, ts_ns, event_id, payload, outcome)")
	if err != nil {
		return fmt.Errorf("prepare messages insert: %w", err)
	}
	defer func() { _ = b.Abort() }()
	for i := range rows {
		r := &rows[i]
		if err := b.Append(r.Serial, r.TsNs, r.EventID, string(r.Payload), r.Outcome); err != nil {
			return fmt.Errorf("append message: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert messages: %w", err)
	}
	return nil
}

// StoredEvents returns which of ids already have values in input_values,
// looking only at the entities and time span given, so that the primary key
// and partitions bound the scan. Used for redelivered events only.
func (s *Store) StoredEvents(ctx context.Context, entities []string, ids []string, minNs, maxNs int64) (map[string]bool, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT event_id FROM "+s.db+".input_values WHERE entity IN ? AND ts_ns >= ? AND ts_ns <= ? AND event_id IN ?",
		set(entities), minNs, maxNs, set(ids))
	if err != nil {
		return nil, fmt.Errorf("look up stored events: %w", err)
	}
	defer rows.Close()
	found := make(map[string]bool)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("scan stored event: %w", err)
		}
		found[id] = true
	}
	return found, rows.Err()
}
