package chstore

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// replicas holds a connection pool per address of CLICKHOUSE_URL and uses
// one at a time: the current one until it fails in a way another replica
// would not (unreachable, read-only because it lost ZooKeeper, behind the
// quorum), then the next. The driver's own failover moves on only from an
// address it cannot dial; a replica cut from ZooKeeper answers every
// insert with TABLE_IS_READ_ONLY, and would be used for as long as it
// answers.
type replicas struct {
	pools []driver.Conn
	cur   atomic.Uint32
	moves atomic.Uint64
}

// openReplicas opens a pool per address (lazily: each dials on first use).
// Pool i dials address i first and the others in turn when it cannot, as
// the driver does with one pool, so that a replica that is down costs no
// failed call.
func openReplicas(cfg Config, user, password string) (*replicas, error) {
	if len(cfg.addrs) == 0 {
		return nil, errors.New("CLICKHOUSE_URL names no address")
	}
	r := &replicas{}
	for i := range cfg.addrs {
		one := cfg
		one.addrs = append(slices.Clone(cfg.addrs[i:]), cfg.addrs[:i]...)
		c, err := open(one, user, password)
		if err != nil {
			r.close()
			return nil, err
		}
		r.pools = append(r.pools, c)
	}
	return r, nil
}

// conn is the pool of the current replica.
func (r *replicas) conn() driver.Conn { return r.pools[int(r.cur.Load())%len(r.pools)] }

// observe moves on from c's replica when err says it cannot serve (and no
// other caller has moved on from it already).
func (r *replicas) observe(c driver.Conn, err error) {
	if err == nil || len(r.pools) == 1 || !replicaDown(err) {
		return
	}
	i := r.cur.Load()
	if r.pools[int(i)%len(r.pools)] != c {
		return
	}
	if r.cur.CompareAndSwap(i, (i+1)%uint32(len(r.pools))) {
		r.moves.Add(1)
	}
}

// use runs f on the current replica's pool and moves on from that replica
// when f's error says it cannot serve. The reads, inserts, restores,
// rollups and Ping go through here; the schema statements, retention's
// sweep, the rollup catch-up's scan and Rows take the current pool
// directly (pipe.conn) and never move the store on.
func (r *replicas) use(f func(c driver.Conn) error) error {
	c := r.conn()
	err := f(c)
	r.observe(c, err)
	return err
}

func (r *replicas) close() {
	for _, c := range r.pools {
		_ = c.Close()
	}
}

// replicaCodes are the ClickHouse exceptions that say this server cannot
// serve now while another replica may.
var replicaCodes = map[int32]string{
	209: "SOCKET_TIMEOUT",
	210: "NETWORK_ERROR",
	225: "NO_ZOOKEEPER",
	242: "TABLE_IS_READ_ONLY",
	289: "REPLICA_IS_NOT_IN_QUORUM",
	999: "KEEPER_EXCEPTION",
}

// replicaDown reports whether err is the server's own trouble: one of
// replicaCodes, or the connection failing (refused, reset, timed out).
// The caller's own cancellation is not.
func replicaDown(err error) bool {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		_, ok := replicaCodes[ex.Code]
		return ok
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
