package chstore

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// pool stands for one replica's connection pool: only its identity counts.
type pool struct {
	driver.Conn
	name string
}

func TestReplicasMoveOnOnlyFromAReplicaThatCannotServe(t *testing.T) {
	a, b, c := &pool{name: "a"}, &pool{name: "b"}, &pool{name: "c"}
	r := &replicas{pools: []driver.Conn{a, b, c}}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	steps := []struct {
		used driver.Conn
		err  error
		want *pool
	}{
		{a, nil, a},
		{a, fmt.Errorf("insert input_values: %w", &clickhouse.Exception{Code: 62, Message: "syntax"}), a}, // the data's fault
		{a, context.Canceled, a}, // the caller gave up
		{a, fmt.Errorf("insert: %w", &clickhouse.Exception{Code: 242, Message: "Table is in readonly mode"}), b},
		{a, &clickhouse.Exception{Code: 242}, b}, // a late failure of a: b is current already
		{b, fmt.Errorf("query: %w", refused), c},
		{c, &clickhouse.Exception{Code: 289, Message: "Replica doesn't have part"}, a}, // around
		{a, context.DeadlineExceeded, b},
		{b, &clickhouse.Exception{Code: 999, Message: "Session expired"}, c},
	}
	for i, s := range steps {
		r.observe(s.used, s.err)
		if got := r.conn().(*pool); got != s.want {
			t.Fatalf("step %d (%v on %s): current %s, want %s", i, s.err, s.used.(*pool).name, got.name, s.want.name)
		}
	}
	if got := r.moves.Load(); got != 5 {
		t.Fatalf("moves = %d, want 5", got)
	}

	one := &replicas{pools: []driver.Conn{a}}
	one.observe(a, &clickhouse.Exception{Code: 242})
	if one.conn() != a || one.moves.Load() != 0 {
		t.Fatalf("a single server moved: %d moves", one.moves.Load())
	}
}

func TestReplicasNeedAnAddress(t *testing.T) {
	cfg := Config{URL: "clickhouse://u@,/db"}
	if err := cfg.Parse(); err != nil {
		return // refused before any pool: as good
	}
	if r, err := openReplicas(cfg, "u", ""); err == nil {
		r.close()
		t.Fatal("a URL without an address opened pools")
	}
}
