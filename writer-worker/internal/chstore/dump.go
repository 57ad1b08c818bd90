package chstore

import (
	"context"
	"encoding/gob"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Block is rows of a table, column by column (a backup's unit): each of
// Columns is a []string, []int64, []uint64, []uint8, []float64 or
// NullFloats of Rows values.
type Block struct {
	Names   []string
	Columns []any
	Rows    int
}

// NullFloats is a Nullable(Float64) column: gob has no nil in a slice.
type NullFloats struct {
	V    []float64
	Null []bool
}

func init() {
	for _, v := range []any{[]string{}, []int64{}, []uint64{}, []uint8{}, []float64{}, NullFloats{}} {
		gob.Register(v)
	}
}

// DumpTable reads every row of table, its stored columns (not ALIAS or
// MATERIALIZED ones), and hands them to f in blocks of blockRows.
func (s *Store) DumpTable(ctx context.Context, table string, blockRows int, f func(Block) error) error {
	type column struct{ name, typ string }
	cols, err := collect(ctx, s.pipe, "list columns of "+table, "scan column",
		"SELECT name, type FROM system.columns WHERE database = ? AND table = ? AND default_kind NOT IN ('ALIAS', 'MATERIALIZED')",
		[]any{s.db, table}, func(scan func(...any) error) (c column, err error) {
			err = scan(&c.name, &c.typ)
			return c, err
		})
	if err != nil {
		return err
	}
	names := make([]string, len(cols))
	for i, c := range cols {
		switch c.typ {
		case "String", "Int64", "UInt64", "UInt8", "Float64", "Nullable(Float64)":
		default:
			return fmt.Errorf("table %s: column %s of type %s cannot be backed up", table, c.name, c.typ)
		}
		names[i] = c.name
	}
	var blk Block
	dest := make([]any, len(cols))
	reset := func() {
		blk = Block{Names: names, Columns: make([]any, len(cols))}
		for i, c := range cols {
			switch c.typ {
			case "String":
				blk.Columns[i] = make([]string, 0, blockRows)
				dest[i] = new(string)
			case "Int64":
				blk.Columns[i] = make([]int64, 0, blockRows)
				dest[i] = new(int64)
			case "UInt64":
				blk.Columns[i] = make([]uint64, 0, blockRows)
				dest[i] = new(uint64)
			case "UInt8":
				blk.Columns[i] = make([]uint8, 0, blockRows)
				dest[i] = new(uint8)
			case "Float64":
				blk.Columns[i] = make([]float64, 0, blockRows)
				dest[i] = new(float64)
			case "Nullable(Float64)":
				blk.Columns[i] = NullFloats{}
				dest[i] = new(*float64)
			}
		}
	}
	reset()
	err = scanRows(ctx, s.pipe, "read "+table, "scan a row of "+table, "SELECT "+strings.Join(names, ", ")+" FROM "+s.db+"."+table, nil,
		func(scan func(...any) error) error {
			if err := scan(dest...); err != nil {
				return err
			}
			for i := range cols {
				switch d := dest[i].(type) {
				case *string:
					blk.Columns[i] = append(blk.Columns[i].([]string), *d)
				case *int64:
					blk.Columns[i] = append(blk.Columns[i].([]int64), *d)
				case *uint64:
					blk.Columns[i] = append(blk.Columns[i].([]uint64), *d)
				case *uint8:
					blk.Columns[i] = append(blk.Columns[i].([]uint8), *d)
				case *float64:
					blk.Columns[i] = append(blk.Columns[i].([]float64), *d)
				case **float64:
					c := blk.Columns[i].(NullFloats)
					c.V, c.Null = append(c.V, 0), append(c.Null, *d == nil)
					if *d != nil {
						c.V[len(c.V)-1] = **d
					}
					blk.Columns[i] = c
				}
			}
			if blk.Rows++; blk.Rows == blockRows {
				if err := f(blk); err != nil {
					return err
				}
				reset()
			}
			return nil
		})
	if err != nil || blk.Rows == 0 {
		return err
	}
	return f(blk)
}

// LoadBlock inserts b into table in one INSERT, column by column.
func (s *Store) LoadBlock(ctx context.Context, table string, b Block) error {
	if b.Rows == 0 {
		return nil
	}
	return s.pipe.use(func(conn driver.Conn) error {
		batch, err := conn.PrepareBatch(lingering(ctx), "INSERT INTO "+s.db+"."+table+" ("+strings.Join(b.Names, ", ")+")")
		if err != nil {
			return fmt.Errorf("prepare %s insert: %w", table, classify(err))
		}
		defer func() { _ = batch.Abort() }()
		for i, col := range b.Columns {
			if nf, ok := col.(NullFloats); ok {
				vs := make([]*float64, len(nf.V))
				for k := range nf.V {
					if !nf.Null[k] {
						vs[k] = &nf.V[k]
					}
				}
				col = vs
			}
			if err := batch.Column(i).Append(col); err != nil {
				return fmt.Errorf("append column %s to %s: %w", b.Names[i], table, err)
			}
		}
		if err := batch.Send(); err != nil {
			return fmt.Errorf("insert %s: %w", table, classify(err))
		}
		return nil
	})
}

// Rows is how many rows table holds.
func (s *Store) Rows(ctx context.Context, table string) (uint64, error) {
	var n uint64
	if err := s.pipe.conn().QueryRow(ctx, "SELECT count() FROM "+s.db+"."+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", table, classify(err))
	}
	return n, nil
}
