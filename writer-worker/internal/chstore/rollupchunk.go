package chstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// The rollup works off its marks in chunks that each fit one query: a
// window of marked time (a minute of it at most), and within it, when
// the window marks more minutes than a query may compute, a run of its
// distinct minutes in key order. A window's chunks are done before the
// next window: a minute marked again and again within it (every insert of
// a live input marks its current minute) is computed once.

// MarkKey orders the distinct minutes of a window: entity, input, minute.
type MarkKey struct {
	Entity, Input string
	Minute        int64
}

// Cursor is where the rollup stands: every mark made up to DoneNs is done;
// when InNs is set, so are the minutes marked in (DoneNs, InNs] with keys
// up to After (a window partly done).
type Cursor struct {
	DoneNs, InNs int64
	After        MarkKey
}

// Chunk is one query's marks: those made in (FromNs, ToNs], their keys in
// (After, Through] (nil: unbounded on that side). Minutes is how many
// distinct minutes they mark.
type Chunk struct {
	FromNs, ToNs   int64
	After, Through *MarkKey
	Minutes        int
}

// Next is the cursor once c is done.
func (c Chunk) Next() Cursor {
	if c.Through == nil {
		return Cursor{DoneNs: c.ToNs}
	}
	return Cursor{DoneNs: c.FromNs, InNs: c.ToNs, After: *c.Through}
}

// NextChunk returns the chunk after cur, of at most maxMinutes distinct
// minutes at or after sinceMinute, marked up to hiNs and within spanNs of
// the first mark after cur: the oldest marks first. A chunk of no minutes
// has nothing to compute (no marks up to hiNs: ToNs is hiNs).
func (s *Store) NextChunk(ctx context.Context, cur Cursor, hiNs, spanNs, sinceMinute int64, maxMinutes int) (Chunk, error) {
	c := Chunk{FromNs: cur.DoneNs, ToNs: cur.InNs}
	if cur.InNs != 0 {
		c.After = &cur.After
	} else {
		var first int64
		var n uint64
		if err := s.pipe.conn().QueryRow(ctx, "SELECT min(marked_ns), count() FROM "+s.db+".rollup_dirty WHERE marked_ns > ? AND marked_ns <= ? AND minute >= ?",
			cur.DoneNs, hiNs, sinceMinute).Scan(&first, &n); err != nil {
			return Chunk{}, fmt.Errorf("read rollup marks: %w", classify(err))
		}
		if n == 0 {
			c.ToNs = hiNs
			return c, nil
		}
		c.ToNs = min(hiNs, first+spanNs-1)
	}
	where, args := c.marked(s.db, sinceMinute)
	keys, err := collect(ctx, s.pipe, "read rollup marks", "scan rollup mark",
		"SELECT entity, input, minute "+where+" GROUP BY entity, input, minute ORDER BY entity, input, minute LIMIT "+strconv.Itoa(maxMinutes+1),
		args, func(scan func(...any) error) (k MarkKey, err error) {
			err = scan(&k.Entity, &k.Input, &k.Minute)
			return k, err
		})
	if err != nil {
		return Chunk{}, err
	}
	c.Minutes = min(len(keys), maxMinutes)
	if len(keys) > maxMinutes {
		c.Through = &keys[maxMinutes-1]
	}
	return c, nil
}

// marked is the FROM and WHERE clauses of c's marks in database db at or
// after sinceMinute, and their arguments.
func (c Chunk) marked(db string, sinceMinute int64) (string, []any) {
	q := " FROM " + db + ".rollup_dirty WHERE marked_ns > ? AND marked_ns <= ? AND minute >= ?"
	args := []any{c.FromNs, c.ToNs, sinceMinute}
	if c.After != nil {
		q += " AND (entity, input, minute) > (?, ?, ?)"
		args = append(args, c.After.Entity, c.After.Input, c.After.Minute)
	}
	if c.Through != nil {
		q += " AND (entity, input, minute) <= (?, ?, ?)"
		args = append(args, c.Through.Entity, c.Through.Input, c.Through.Minute)
	}
	return q, args
}

// TooBig reports whether err is a rollup query that did not fit: over the
// rows it may read, over ClickHouse's memory limit, or out of time. Such a
// chunk is split, not repeated.
func TooBig(err error) bool {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case 158, 159, 160, 241: // TOO_MANY_ROWS, TIMEOUT_EXCEEDED, TOO_SLOW, MEMORY_LIMIT_EXCEEDED
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// readLimit bounds the rows each query of ctx may read, as ClickHouse
// estimates them from the primary key before it reads any (0: no bound).
func readLimit(ctx context.Context, rows uint64) context.Context {
	if rows == 0 {
		return ctx
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_rows_to_read": int(rows)}))
}
