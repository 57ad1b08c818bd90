package chstore

import "context"

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
// message logged twice by a redelivery is one).
func (s *Store) RawMessages(ctx context.Context, serial string, afterNs int64, afterID string, toNs int64, limit int) ([]RawMessage, error) {
	return collect(ctx, s.conn, "query raw messages", "scan raw message",
		"SELECT ts_ns, event_id, payload, reading_ns FROM "+s.db+".device_messages WHERE serial = ? AND ts_ns >= ? AND ts_ns < ? AND (ts_ns > ? OR event_id > ?) ORDER BY ts_ns, event_id LIMIT 1 BY ts_ns, event_id LIMIT ?",
		[]any{serial, afterNs, toNs, afterNs, afterID, limit}, func(scan func(...any) error) (m RawMessage, err error) {
			var payload string
			err = scan(&m.TsNs, &m.EventID, &payload, &m.ReadingNs)
			m.Payload = []byte(payload)
			return m, err
		})
}

// ValueKey is what makes a row of input_values one reading (its sorting
// key but for the reading time, which the event id fixes).
type ValueKey struct{ Entity, Input, EventID, DeviceInput string }

// StoredValues returns which of serial's values of the given entities and
// inputs with reading times in [minNs, maxNs] are stored.
func (s *Store) StoredValues(ctx context.Context, serial string, entities, inputs []string, minNs, maxNs int64) (map[ValueKey]bool, error) {
	found := make(map[ValueKey]bool)
	err := scanRows(ctx, s.conn, "look up stored values", "scan stored value",
		"SELECT DISTINCT entity, input, event_id, device_input FROM "+s.db+".input_values WHERE entity IN ? AND input IN ? AND ts_ns >= ? AND ts_ns <= ? AND serial = ?",
		[]any{set(entities), set(inputs), minNs, maxNs, serial}, func(scan func(...any) error) error {
			var k ValueKey
			if err := scan(&k.Entity, &k.Input, &k.EventID, &k.DeviceInput); err != nil {
				return err
			}
			found[k] = true
			return nil
		})
	return found, err
}
