package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(query.TimeLayout) }

// Messages returns a device's newest raw messages first.
func (s *Store) Messages(ctx context.Context, serial string, limit int) ([]query.Message, error) {
	rows, err := s.conn.Query(ctx, "SELECT event_id, ts_ms, payload, outcome, intDiv(reading_ns, 1000000), time_note FROM "+s.db+".device_messages WHERE serial = ? ORDER BY ts_ns DESC LIMIT 1 BY event_id LIMIT ?",
		serial, limit)
	if err != nil {
		return nil, fmt.Errorf("query messages: %w", err)
	}
	defer rows.Close()
	var out []query.Message
	for rows.Next() {
		var (
			m        query.Message
			ms, rdMs int64
			payload  string
		)
		if err := rows.Scan(&m.EventID, &ms, &payload, &m.Outcome, &rdMs, &m.TimeNote); err != nil {
			return nil, fmt.Errorf("scan message: %w", err)
		}
		m.ReceivedAt, m.ReadingTime, m.Payload = msTime(ms), msTime(rdMs), json.RawMessage(payload)
		out = append(out, m)
	}
	return out, rows.Err()
}

// Latest returns the value of an entity input with the greatest reading
// time (of two with the same, the later received), if any: a backlog
// arriving after a newer reading does not replace it.
func (s *Store) Latest(ctx context.Context, entity, input string) ([]query.Point, error) {
	return s.points(ctx, "SELECT ts_ms, value_json, serial, intDiv(received_ns, 1000000) FROM "+s.db+".input_values WHERE entity = ? AND input = ? ORDER BY ts_ns DESC, received_ns DESC LIMIT 1",
		entity, input)
}

// Series returns an entity input's values with reading times in [fromMs,
// toMs], in reading-time order; readings with the same reading time in
// arrival order.
func (s *Store) Series(ctx context.Context, entity, input string, fromMs, toMs int64, limit int) ([]query.Point, error) {
	return s.points(ctx, "SELECT ts_ms, value_json, serial, intDiv(received_ns, 1000000) FROM "+s.db+".input_values WHERE entity = ? AND input = ? AND ts_ns >= ? AND ts_ns < ? ORDER BY ts_ns, received_ns LIMIT 1 BY event_id, device_input LIMIT ?",
		entity, input, fromMs*1e6, (toMs+1)*1e6, limit)
}

func (s *Store) points(ctx context.Context, q string, args ...any) ([]query.Point, error) {
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("query values: %w", err)
	}
	defer rows.Close()
	var out []query.Point
	for rows.Next() {
		var (
			p        query.Point
			ms, rcMs int64
			v        string
		)
		if err := rows.Scan(&ms, &v, &p.Serial, &rcMs); err != nil {
			return nil, fmt.Errorf("scan value: %w", err)
		}
		p.TS, p.ReceivedAt, p.Value = msTime(ms), msTime(rcMs), json.RawMessage(v)
		out = append(out, p)
	}
	return out, rows.Err()
}
