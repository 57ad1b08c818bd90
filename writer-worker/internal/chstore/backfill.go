package chstore

import (
	"context"
	"fmt"
)

// RawMessage is a kept raw message as a backfill reads it.
type RawMessage struct {
	TsNs      int64 // receive time
	EventID   string
	Payload   []byte
	ReadingNs int64
}

// RawMessages returns at most limit of serial's raw messages received
// before toNs that come after (afterNs, afterID) in receive order (afterID
// "": every message at afterNs comes after), in that order and each once (a
// message logged twice by a redelivery is one), and no more than maxBytes
// of payloads (at least one message); more: the bounds left some out.
// Their sizes are read first, so that a device that sent large bodies
// costs no more memory than one with small.
func (s *Store) RawMessages(ctx context.Context, serial string, afterNs int64, afterID string, toNs int64, limit int, maxBytes int64) (_ []RawMessage, more bool, _ error) {
	const from = " FROM %s.device_messages WHERE serial = ? AND ts_ns >= ? AND ts_ns < ? AND (ts_ns > ? OR event_id > ?)"
	const order = " ORDER BY ts_ns, event_id LIMIT 1 BY ts_ns, event_id LIMIT ?"
	where := fmt.Sprintf(from, s.db)
	args := []any{serial, afterNs, toNs, afterNs, afterID}
	var lastNs int64
	var lastID string
	n, bytes := 0, int64(0)
	err := scanRows(ctx, s.pipe, "query raw message sizes", "scan raw message size", "SELECT ts_ns, event_id, length(payload)"+where+order,
		append(args, limit+1), func(scan func(...any) error) error {
			var ts int64
			var id string
			var size uint64
			if err := scan(&ts, &id, &size); err != nil {
				return err
			}
			if more = more || n > 0 && bytes+int64(size) > maxBytes || n == limit; more {
				return nil
			}
			lastNs, lastID, n, bytes = ts, id, n+1, bytes+int64(size)
			return nil
		})
	if err != nil || n == 0 {
		return nil, false, err
	}
	msgs, err := collect(ctx, s.pipe, "query raw messages", "scan raw message",
		"SELECT ts_ns, event_id, payload, reading_ns"+where+" AND (ts_ns < ? OR ts_ns = ? AND event_id <= ?)"+order,
		append(args, lastNs, lastNs, lastID, n), func(scan func(...any) error) (m RawMessage, err error) {
			var payload string
			err = scan(&m.TsNs, &m.EventID, &payload, &m.ReadingNs)
			m.Payload = []byte(payload)
			return m, err
		})
	return msgs, more, err
}

// ValueKey is what makes a row of input_values one reading (its sorting
// key but for the reading time, which the event id fixes).
type ValueKey struct{ Entity, Input, EventID, DeviceInput string }

// StoredValues returns which of serial's values of the given entities,
// inputs and events with reading times in [minNs, maxNs] are stored: at
// most the values of those events, however wide the range.
func (s *Store) StoredValues(ctx context.Context, serial string, entities, inputs, events []string, minNs, maxNs int64) (map[ValueKey]bool, error) {
	found := make(map[ValueKey]bool)
	err := scanRows(ctx, s.pipe, "look up stored values", "scan stored value",
		"SELECT DISTINCT entity, input, event_id, device_input FROM "+s.db+".input_values WHERE entity IN ? AND input IN ? AND ts_ns >= ? AND ts_ns <= ? AND serial = ? AND event_id IN ?",
		[]any{set(entities), set(inputs), minNs, maxNs, serial, set(events)}, func(scan func(...any) error) error {
			var k ValueKey
			if err := scan(&k.Entity, &k.Input, &k.EventID, &k.DeviceInput); err != nil {
				return err
			}
			found[k] = true
			return nil
		})
	return found, err
}
