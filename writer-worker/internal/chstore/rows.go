package chstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

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

// Kind classifies a JSON value as the value_type column does, and gives the
// numeric projection analysts aggregate: numbers as themselves, booleans as
// 1/0, everything else (and numbers beyond float64) none.
func Kind(v json.RawMessage) (kind string, num *float64) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "string", nil
	}
	one, zero := 1.0, 0.0
	switch v[0] {
	case '"':
		return "string", nil
	case '{':
		return "object", nil
	case '[':
		return "array", nil
	case 't':
		return "bool", &one
	case 'f':
		return "bool", &zero
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return "number", nil
	}
	return "number", &f
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

func secs(ns int64) time.Time { return time.Unix(ns/1e9, 0).UTC() }

// InsertValues writes rows in one INSERT.
func (s *Store) InsertValues(ctx context.Context, rows []ValueRow) error {
	if len(rows) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.db+".input_values (entity, input, ts, ts_ms, ts_ns, serial, device_input, event_id, value_type, value_num, value_json)")
	if err != nil {
		return fmt.Errorf("prepare values insert: %w", err)
	}
	defer func() { _ = b.Abort() }()
	for i := range rows {
		r := &rows[i]
		kind, num := Kind(r.JSON)
		if err := b.Append(r.Entity, r.Input, secs(r.TsNs), r.TsNs/1e6, r.TsNs, r.Serial, r.DeviceInput, r.EventID,
			kind, num, string(r.JSON)); err != nil {
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
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.db+".device_messages (serial, ts, ts_ms, ts_ns, event_id, payload, outcome)")
	if err != nil {
		return fmt.Errorf("prepare messages insert: %w", err)
	}
	defer func() { _ = b.Abort() }()
	for i := range rows {
		r := &rows[i]
		if err := b.Append(r.Serial, secs(r.TsNs), r.TsNs/1e6, r.TsNs, r.EventID, string(r.Payload), r.Outcome); err != nil {
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
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT event_id FROM "+s.db+".input_values WHERE ts >= ? AND ts <= ? AND entity IN ? AND event_id IN ?",
		secs(minNs), secs(maxNs), set(entities), set(ids))
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
