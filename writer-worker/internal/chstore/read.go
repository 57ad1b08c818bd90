package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/devicehub/eventservice/pkg/query"
)

func msTime(ms int64) string { return query.FormatNs(ms * 1e6) }

// Messages returns a device's newest raw messages first, received before
// beforeNs (0: any), at most limit of them and no more than budget bytes
// of payloads, query.RowBytes each besides (at least one message); next
// is the beforeNs of the page after, 0
// when there is none. The page is chosen from the messages' sizes first,
// so that no more payloads are read than are answered.
func (s *Store) Messages(ctx context.Context, serial string, limit, budget int, beforeNs int64) (_ []query.Message, next int64, _ error) {
	if beforeNs <= 0 {
		beforeNs = math.MaxInt64
	}
	rows, err := s.reads.conn().Query(ctx, "SELECT event_id, ts_ns, length(payload) FROM "+s.db+".device_messages WHERE serial = ? AND ts_ns < ? ORDER BY ts_ns DESC, event_id LIMIT 1 BY event_id LIMIT ?",
		serial, beforeNs, limit+1)
	if err != nil {
		return nil, 0, fmt.Errorf("query messages: %w", err)
	}
	var ids []string
	var oldest, bytes int64
	more := false
	for rows.Next() {
		var id string
		var ts int64
		var n uint64
		if err := rows.Scan(&id, &ts, &n); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("scan message: %w", err)
		}
		if len(ids) == limit || len(ids) > 0 && bytes+int64(n)+query.RowBytes > int64(budget) {
			more = true
			break
		}
		ids, oldest, bytes = append(ids, id), ts, bytes+int64(n)+query.RowBytes
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("query messages: %w", err)
	}
	if len(ids) == 0 {
		return nil, 0, nil
	}
	if more {
		next = oldest
	}
	out, err := collect(ctx, s.reads, "query messages", "scan message",
		"SELECT event_id, ts_ms, payload, outcome, intDiv(reading_ns, 1000000), time_note, token FROM "+s.db+".device_messages WHERE serial = ? AND event_id IN ? AND ts_ns >= ? AND ts_ns < ? ORDER BY ts_ns DESC, event_id LIMIT 1 BY event_id",
		[]any{serial, set(ids), oldest, beforeNs}, func(scan func(...any) error) (m query.Message, err error) {
			var ms, rdMs int64
			var payload string
			err = scan(&m.EventID, &ms, &payload, &m.Outcome, &rdMs, &m.TimeNote, &m.Token)
			m.ReceivedAt, m.ReadingTime, m.Payload = msTime(ms), msTime(rdMs), json.RawMessage(payload)
			return m, err
		})
	return out, next, err
}

// Latest returns the value of an entity input with the greatest reading
// time (of two with the same, the later received), if any: a backlog
// arriving after a newer reading does not replace it. A value over budget
// is left out, with its size.
func (s *Store) Latest(ctx context.Context, entity, input string, budget int) ([]query.Point, error) {
	return s.points(ctx, "SELECT ts_ms, "+capped("value_json", share(budget, 1))+", serial, intDiv(received_ns, 1000000) FROM "+s.db+
		".input_values WHERE entity = ? AND input = ? ORDER BY ts_ns DESC, received_ns DESC LIMIT 1", entity, input)
}

// seriesFrom selects an entity input's readings with reading times in
// [?, ?), in reading-time order (readings with the same reading time in
// arrival order), each once, at most ? of them.
func (s *Store) seriesFrom(columns string) string {
	return "SELECT " + columns + " FROM " + s.db + ".input_values WHERE entity = ? AND input = ? AND ts_ns >= ? AND ts_ns < ?" +
		" ORDER BY ts_ns, received_ns, event_id, device_input LIMIT 1 BY event_id, device_input LIMIT ?"
}

// Series returns a page of an entity input's values with reading times in
// [fromMs, toMs]: at most limit of them and budget bytes (pageCut), and
// the fromMs of the page after (0: none). The page is chosen from the
// values' sizes first, so that no more values are read than are answered.
func (s *Store) Series(ctx context.Context, entity, input string, fromMs, toMs int64, limit, budget int) (_ []query.Point, nextMs int64, _ error) {
	fromNs, toNs := fromMs*1e6, (toMs+1)*1e6
	var ms []int64
	var size []int
	err := scanRows(ctx, s.reads, "query value sizes", "scan value size", s.seriesFrom("ts_ms, length(value_json) + length(serial)"),
		[]any{entity, input, fromNs, toNs, limit + 1}, func(scan func(...any) error) error {
			var t int64
			var n uint64
			err := scan(&t, &n)
			ms, size = append(ms, t), append(size, int(n))
			return err
		})
	if err != nil || len(ms) == 0 {
		return nil, 0, err
	}
	rows, nextMs := pageCut(ms, size, limit, budget)
	if nextMs > 0 {
		toNs = nextMs * 1e6
	}
	pts, err := s.points(ctx, s.seriesFrom("ts_ms, value_json, length(value_json), serial, intDiv(received_ns, 1000000)"), entity, input, fromNs, toNs, rows)
	return pts, nextMs, err
}

func (s *Store) points(ctx context.Context, q string, args ...any) ([]query.Point, error) {
	return collect(ctx, s.reads, "query values", "scan value", q, args, func(scan func(...any) error) (p query.Point, err error) {
		var ms, rcMs int64
		var v string
		var n uint64
		err = scan(&ms, &v, &n, &p.Serial, &rcMs)
		p.TS, p.ReceivedAt = msTime(ms), msTime(rcMs)
		p.Value, p.ValueBytes = cutValue(v, n)
		return p, err
	})
}

// LastSeen returns the receive time of the newest message of each serial
// that has one.
func (s *Store) LastSeen(ctx context.Context, serials []string) (map[string]string, error) {
	out := make(map[string]string, len(serials))
	if len(serials) == 0 {
		return out, nil
	}
	err := scanRows(ctx, s.reads, "query last seen", "scan last seen",
		"SELECT serial, intDiv(max(ts_ns), 1000000) FROM "+s.db+".device_messages WHERE serial IN ? GROUP BY serial",
		[]any{set(serials)}, func(scan func(...any) error) error {
			var serial string
			var ms int64
			if err := scan(&serial, &ms); err != nil {
				return err
			}
			out[serial] = msTime(ms)
			return nil
		})
	return out, err
}

// LatestOf returns the latest value (as Latest chooses it) of each pair that
// has one, with its entity and input named; each value has an even share
// of budget, and one over it is left out, with its size.
func (s *Store) LatestOf(ctx context.Context, pairs []query.EntityInput, budget int) ([]query.Point, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	var entities, keys []string
	seen := make(map[string]bool)
	for _, p := range pairs {
		if !seen[p.Entity] {
			seen[p.Entity] = true
			entities = append(entities, p.Entity)
		}
		keys = append(keys, p.Entity+"\x00"+p.Input)
	}
	// The entity filter uses the primary key; the pair filter keeps only the
	// inputs asked for.
	return collect(ctx, s.reads, "query latest values", "scan latest value",
		"SELECT entity, input, intDiv(max(ts_ns), 1000000), "+capped("argMax(value_json, (ts_ns, received_ns))", share(budget, int64(len(pairs))))+", argMax(serial, (ts_ns, received_ns)) FROM "+s.db+
			".input_values WHERE entity IN ? AND concat(entity, '\\0', input) IN ? GROUP BY entity, input",
		[]any{set(entities), set(keys)}, func(scan func(...any) error) (p query.Point, err error) {
			var ms int64
			var v string
			var n uint64
			err = scan(&p.Entity, &p.Input, &ms, &v, &n, &p.Serial)
			p.TS = msTime(ms)
			p.Value, p.ValueBytes = cutValue(v, n)
			return p, err
		})
}
