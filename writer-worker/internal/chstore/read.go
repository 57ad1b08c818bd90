package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(query.TimeLayout) }

// Messages returns a device's newest raw messages first, received before
// beforeNs (0: any), at most limit of them and no more than query.MaxBytes
// of payloads (at least one); next is the beforeNs of the page after, 0
// when there is none. The page is chosen from the messages' sizes first,
// so that no more payloads are read than are answered.
func (s *Store) Messages(ctx context.Context, serial string, limit int, beforeNs int64) (_ []query.Message, next int64, _ error) {
	if beforeNs <= 0 {
		beforeNs = math.MaxInt64
	}
	rows, err := s.reads.Query(ctx, "SELECT event_id, ts_ns, length(payload) FROM "+s.db+".device_messages WHERE serial = ? AND ts_ns < ? ORDER BY ts_ns DESC, event_id LIMIT 1 BY event_id LIMIT ?",
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
		if len(ids) == limit || len(ids) > 0 && bytes+int64(n) > query.MaxBytes {
			more = true
			break
		}
		ids, oldest, bytes = append(ids, id), ts, bytes+int64(n)
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
	rows, err = s.reads.Query(ctx, "SELECT event_id, ts_ms, payload, outcome, intDiv(reading_ns, 1000000), time_note, token FROM "+s.db+".device_messages WHERE serial = ? AND event_id IN ? AND ts_ns >= ? AND ts_ns < ? ORDER BY ts_ns DESC, event_id LIMIT 1 BY event_id",
		serial, set(ids), oldest, beforeNs)
	if err != nil {
		return nil, 0, fmt.Errorf("query messages: %w", err)
	}
	defer rows.Close()
	out := make([]query.Message, 0, len(ids))
	for rows.Next() {
		var (
			m        query.Message
			ms, rdMs int64
			payload  string
		)
		if err := rows.Scan(&m.EventID, &ms, &payload, &m.Outcome, &rdMs, &m.TimeNote, &m.Token); err != nil {
			return nil, 0, fmt.Errorf("scan message: %w", err)
		}
		m.ReceivedAt, m.ReadingTime, m.Payload = msTime(ms), msTime(rdMs), json.RawMessage(payload)
		out = append(out, m)
	}
	return out, next, rows.Err()
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
	rows, err := s.reads.Query(ctx, q, args...)
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

// SeriesBuckets aggregates an entity input's values with reading times in
// [fromMs, toMs] into buckets of stepMs aligned to the epoch, in time order;
// empty buckets are left out. Count is the number of distinct readings
// (a duplicate that ReplacingMergeTree has not folded yet is counted once);
// Min, Max and Avg cover the numbers and booleans, Last is the value with
// the greatest reading time (then receive time). Avg may weigh such an
// unfolded duplicate twice until the merge.
func (s *Store) SeriesBuckets(ctx context.Context, entity, input string, fromMs, toMs, stepMs int64) ([]query.Bucket, error) {
	rows, err := s.reads.Query(ctx, "SELECT intDiv(ts_ns, ?) AS b, uniqExact(cityHash64(event_id, device_input)), min(value_num), max(value_num), avg(value_num), argMax(value_json, (ts_ns, received_ns)) FROM "+s.db+
		".input_values WHERE entity = ? AND input = ? AND ts_ns >= ? AND ts_ns < ? GROUP BY b ORDER BY b",
		stepMs*1e6, entity, input, fromMs*1e6, (toMs+1)*1e6)
	if err != nil {
		return nil, fmt.Errorf("query buckets: %w", err)
	}
	defer rows.Close()
	var out []query.Bucket
	for rows.Next() {
		var (
			b           query.Bucket
			n           int64
			mn, mx, avg *float64
			last        string
		)
		if err := rows.Scan(&n, &b.Count, &mn, &mx, &avg, &last); err != nil {
			return nil, fmt.Errorf("scan bucket: %w", err)
		}
		b.TS, b.Min, b.Max, b.Last = msTime(n*stepMs), mn, mx, json.RawMessage(last)
		if avg != nil && !math.IsNaN(*avg) {
			b.Avg = avg
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// LastSeen returns the receive time of the newest message of each serial
// that has one.
func (s *Store) LastSeen(ctx context.Context, serials []string) (map[string]string, error) {
	out := make(map[string]string, len(serials))
	if len(serials) == 0 {
		return out, nil
	}
	rows, err := s.reads.Query(ctx, "SELECT serial, intDiv(max(ts_ns), 1000000) FROM "+s.db+".device_messages WHERE serial IN ? GROUP BY serial", set(serials))
	if err != nil {
		return nil, fmt.Errorf("query last seen: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			serial string
			ms     int64
		)
		if err := rows.Scan(&serial, &ms); err != nil {
			return nil, fmt.Errorf("scan last seen: %w", err)
		}
		out[serial] = msTime(ms)
	}
	return out, rows.Err()
}

// LatestOf returns the latest value (as Latest chooses it) of each pair that
// has one, with its entity and input named.
func (s *Store) LatestOf(ctx context.Context, pairs []query.EntityInput) ([]query.Point, error) {
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
	rows, err := s.reads.Query(ctx, "SELECT entity, input, intDiv(max(ts_ns), 1000000), argMax(value_json, (ts_ns, received_ns)), argMax(serial, (ts_ns, received_ns)) FROM "+s.db+
		".input_values WHERE entity IN ? AND concat(entity, '\\0', input) IN ? GROUP BY entity, input",
		set(entities), set(keys))
	if err != nil {
		return nil, fmt.Errorf("query latest values: %w", err)
	}
	defer rows.Close()
	var out []query.Point
	for rows.Next() {
		var (
			p  query.Point
			ms int64
			v  string
		)
		if err := rows.Scan(&p.Entity, &p.Input, &ms, &v, &p.Serial); err != nil {
			return nil, fmt.Errorf("scan latest value: %w", err)
		}
		p.TS, p.Value = msTime(ms), json.RawMessage(v)
		out = append(out, p)
	}
	return out, rows.Err()
}
