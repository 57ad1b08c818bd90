package chstore

import (
	"context"
	"fmt"
	"testing"
)

// A table's rows dumped in blocks and loaded into another database come
// back the same, NULLs included (a rollup of strings has no min).
func TestDumpAndLoad(t *testing.T) {
	src, dst := openTest(t), openTest(t)
	ctx := context.Background()
	if err := src.pipe.conn().Exec(ctx, "INSERT INTO "+src.db+".input_minutes (entity, input, bucket, readings, numbers, min_value, max_value, sum_value, last_ns, last_value, version) "+
		"SELECT concat('e', toString(number)), 'i', number * 60, 1, number % 2, if(number % 2 = 1, toNullable(toFloat64(number)), NULL), NULL, number, number, toString(number), 7 FROM system.numbers LIMIT 2500"); err != nil {
		t.Fatal(err)
	}
	blocks := 0
	err := src.DumpTable(ctx, "input_minutes", 1000, func(b Block) error {
		blocks++
		return dst.LoadBlock(ctx, "input_minutes", b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if blocks != 3 {
		t.Fatalf("%d blocks of at most 1,000 rows for 2,500, want 3", blocks)
	}
	q := "SELECT count(), sum(readings), countIf(min_value IS NULL), sum(ifNull(min_value, 0)), countIf(max_value IS NULL), sum(cityHash64(entity, last_value)) FROM %s.input_minutes"
	var a, b [6]any
	for i := range a {
		a[i], b[i] = new(uint64), new(uint64)
	}
	a[3], b[3] = new(float64), new(float64)
	if err := src.pipe.conn().QueryRow(ctx, fmt.Sprintf(q, src.db)).Scan(a[:]...); err != nil {
		t.Fatal(err)
	}
	if err := dst.pipe.conn().QueryRow(ctx, fmt.Sprintf(q, dst.db)).Scan(b[:]...); err != nil {
		t.Fatal(err)
	}
	got, want := fmt.Sprint(derefAll(b[:])), fmt.Sprint(derefAll(a[:]))
	if got != want || want != "[2500 2500 1250 1.5625e+06 2500 "+fmt.Sprint(*a[5].(*uint64))+"]" {
		t.Fatalf("loaded %s, dumped %s", got, want)
	}
}

func derefAll(ps []any) []any {
	out := make([]any, len(ps))
	for i, p := range ps {
		switch v := p.(type) {
		case *uint64:
			out[i] = *v
		case *float64:
			out[i] = *v
		}
	}
	return out
}
