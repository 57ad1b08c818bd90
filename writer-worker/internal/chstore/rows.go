package chstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/pkg/failure"
)

// ValueRow is one row of input_values.
type ValueRow struct {
	Entity, Input string
	TsNs          int64 // reading time
	ReceivedNs    int64
	Serial        string
	DeviceInput   string
	EventID       string
	JSON          json.RawMessage
}

// MessageRow is one row of device_messages.
type MessageRow struct {
	Serial    string
	TsNs      int64 // receive time
	EventID   string
	Payload   []byte
	Outcome   string
	ReadingNs int64
	TimeNote  string
	Token     string // the name of the device token used
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

// scanRows runs q on conn and calls row for every row of the answer with
// that row's Scan. failed and scanned begin the errors of the query and of
// a row ("query values", "scan value"); the answer's own error is returned
// as it is.
func scanRows(ctx context.Context, r *replicas, failed, scanned, q string, args []any, row func(scan func(dest ...any) error) error) error {
	return r.use(func(conn driver.Conn) error {
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", failed, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := row(rows.Scan); err != nil {
				return fmt.Errorf("%s: %w", scanned, err)
			}
		}
		return rows.Err()
	})
}

// collect is scanRows for answers of one T per row, which row makes.
func collect[T any](ctx context.Context, conn *replicas, failed, scanned, q string, args []any, row func(scan func(...any) error) (T, error)) ([]T, error) {
	var out []T
	err := scanRows(ctx, conn, failed, scanned, q, args, func(scan func(...any) error) error {
		v, err := row(scan)
		out = append(out, v)
		return err
	})
	return out, err
}

// insert writes n rows into table in one INSERT; fill puts row i's values,
// in the order of columns, into args (reused from row to row).
func (s *Store) insert(ctx context.Context, table, columns string, n, width int, fill func(i int, args []any)) error {
	if n == 0 {
		return nil
	}
	ctx = lingering(ctx)
	return s.pipe.use(func(conn driver.Conn) error {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+s.db+"."+table+" ("+columns+")")
		if err != nil {
			return fmt.Errorf("prepare %s insert: %w", table, classify(err))
		}
		defer func() { _ = b.Abort() }()
		args := make([]any, width)
		for i := range n {
			fill(i, args)
			if err := b.Append(args...); err != nil {
				// The driver could not convert a value for the table's
				// columns: the same data fails every time.
				return fmt.Errorf("append to %s: %w", table, failure.AsPermanent(err))
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("insert %s: %w", table, classify(err))
		}
		return nil
	})
}

// lingering returns a context with ctx's values and deadline that is not
// cancelled with it. clickhouse-go (v2.50) watches a batch's context from a
// goroutine that, on a busy machine, may still be waiting to run when Send
// has returned and the connection is back in the pool; if the context is
// cancelled by then, that goroutine closes the connection under its next
// user ("use of closed network connection", a whole batch failed). An
// insert's context therefore ends only at its deadline, long after the
// watcher is gone. Without a deadline the driver's read timeout bounds it.
func lingering(ctx context.Context) context.Context {
	detached := context.WithoutCancel(ctx)
	deadline, ok := ctx.Deadline()
	if !ok {
		return detached
	}
	dctx, cancel := context.WithDeadline(detached, deadline)
	time.AfterFunc(time.Until(deadline), cancel)
	return dctx
}

// MaxPartitionsPerInsert is the most partitions (months of reading time)
// one INSERT touches: ClickHouse refuses more than 100 by default
// (max_partitions_per_insert_block; 18.16 has no such bound).
const MaxPartitionsPerInsert = 100

// InsertValues writes rows in one INSERT, or, when they span more than
// MaxPartitionsPerInsert months of reading time, in one per that many
// months (possible only with MAX_READING_AGE above eight years).
func (s *Store) InsertValues(ctx context.Context, rows []ValueRow) error {
	for _, part := range SplitByMonths(rows, MaxPartitionsPerInsert) {
		err := s.insert(ctx, "input_values", "entity, input, ts_ns, received_ns, serial, device_input, event_id, value_json", len(part), 8,
			func(i int, a []any) {
				r := &part[i]
				a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = r.Entity, r.Input, r.TsNs, r.ReceivedNs, r.Serial, r.DeviceInput, r.EventID, string(r.JSON)
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// SplitByMonths returns rows as groups that each span at most max months
// of reading time (UTC, as the table's partitions); rows itself when they
// already do. Rows of one month stay together and in order.
func SplitByMonths(rows []ValueRow, max int) [][]ValueRow {
	month := func(ns int64) int {
		t := time.Unix(0, ns).UTC()
		return t.Year()*12 + int(t.Month())
	}
	months := make(map[int]struct{})
	for i := range rows {
		months[month(rows[i].TsNs)] = struct{}{}
		if len(months) > max {
			break
		}
	}
	if len(months) <= max {
		return [][]ValueRow{rows}
	}
	sorted := slices.Clone(rows)
	slices.SortStableFunc(sorted, func(a, b ValueRow) int { return cmp.Compare(month(a.TsNs), month(b.TsNs)) })
	var out [][]ValueRow
	start, n := 0, 0
	for i := range sorted {
		if i > 0 && month(sorted[i].TsNs) != month(sorted[i-1].TsNs) {
			if n++; n == max {
				out = append(out, sorted[start:i])
				start, n = i, 0
			}
		}
	}
	return append(out, sorted[start:])
}

// InsertMessages writes rows in one INSERT.
func (s *Store) InsertMessages(ctx context.Context, rows []MessageRow) error {
	return s.insert(ctx, "device_messages", "serial, ts_ns, event_id, payload, outcome, reading_ns, time_note, token", len(rows), 8,
		func(i int, a []any) {
			r := &rows[i]
			a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7] = r.Serial, r.TsNs, r.EventID, string(r.Payload), r.Outcome, r.ReadingNs, r.TimeNote, r.Token
		})
}

// Presence is what the check of input_values found of an event.
type Presence uint8

const (
	Absent Presence = iota
	// Stored: its values are there (acknowledged by the insert quorum,
	// where there is one).
	Stored
	// Unsettled: this replica holds its values from an insert whose
	// quorum is still pending: an insert that gave up waiting (a timeout,
	// ZooKeeper lost) but went through. The quorum may yet be reached
	// (stored) or fail (the part is dropped): until then, neither
	// answering stored nor storing again is safe.
	Unsettled
)

func (p Presence) String() string { return [...]string{"absent", "stored", "unsettled"}[p] }

// StoredEvents returns which of ids already have values in input_values
// (those absent are left out), looking only at the entities and time span
// given, so that the primary key and partitions bound the scan. Used for
// redelivered events only.
func (s *Store) StoredEvents(ctx context.Context, entities []string, ids []string, minNs, maxNs int64) (map[string]Presence, error) {
	found := make(map[string]Presence)
	lookup := func(ctx context.Context, p Presence) error {
		return scanRows(ctx, s.pipe, "look up stored events", "scan stored event",
			"SELECT DISTINCT event_id FROM "+s.db+".input_values WHERE entity IN ? AND ts_ns >= ? AND ts_ns <= ? AND event_id IN ?",
			[]any{set(entities), minNs, maxNs, set(ids)}, func(scan func(...any) error) error {
				var id string
				if err := scan(&id); err != nil {
					return err
				}
				if found[id] == Absent {
					found[id] = p
				}
				return nil
			})
	}
	if err := lookup(ctx, Stored); err != nil || s.cfg.Quorum() == 0 {
		return found, err
	}
	// With a quorum, reads see what the quorum acknowledged; what this
	// replica holds beyond that is an insert whose quorum is pending.
	return found, lookup(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"select_sequential_consistency": 0})), Unsettled)
}
