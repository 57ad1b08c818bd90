// Package chstore is writer-worker's ClickHouse access: schema, batch
// inserts of values and raw messages, and the workspace read queries.
package chstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/writer-worker/schema"
)

// Store holds the connection pools: one for the pipeline (inserts, its
// own checks), one for the workspace reads.
type Store struct {
	pipe  *replicas
	reads *replicas
	db    string
	cfg   Config
	// rolled is where the rollups end (SetRolledUp): 0, none are read.
	rolled atomic.Int64
}

// Open connects (lazily: the pools dial on first use) and returns a Store.
func Open(cfg Config) (*Store, error) {
	if cfg.addrs == nil {
		if err := cfg.Parse(); err != nil {
			return nil, err
		}
	}
	pipe, err := openReplicas(cfg, cfg.User, cfg.Password)
	if err != nil {
		return nil, err
	}
	reads := pipe
	if cfg.ReadUser != "" {
		if reads, err = openReplicas(cfg, cfg.ReadUser, cfg.ReadPassword); err != nil {
			pipe.close()
			return nil, err
		}
	}
	return &Store{pipe: pipe, reads: reads, db: cfg.Database, cfg: cfg}, nil
}

func open(cfg Config, user, password string) (driver.Conn, error) {
	opts := &clickhouse.Options{
		Addr:             cfg.addrs,
		Auth:             clickhouse.Auth{Database: "default", Username: user, Password: password},
		DialTimeout:      dialTimeout,
		ReadTimeout:      readTimeout,
		MaxOpenConns:     maxConns,
		MaxIdleConns:     maxConns,
		ConnMaxLifetime:  time.Hour,
		ConnOpenStrategy: clickhouse.ConnOpenInOrder,
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	opts.TLS = tc
	// Sent with every query: the insert quorum, and the sequential
	// consistency that lets reads see every quorum insert.
	settings := clickhouse.Settings{}
	if q := cfg.Quorum(); q > 0 {
		// A quorum not reached within the insert's own time is a failed
		// insert (retried; the duplicate checks find what did land), not a
		// 10-minute wait (the server's default).
		settings["insert_quorum"] = q
		settings["insert_quorum_timeout"] = int(readTimeout.Milliseconds())
		settings["select_sequential_consistency"] = 1
	}
	if cfg.Cluster != "" {
		// An insert returns once every shard has its rows, not once they
		// are queued on the server written to.
		settings["insert_distributed_sync"] = 1
	}
	opts.Settings = settings
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse: %w", err)
	}
	return conn, nil
}

// Migrate applies the schema: the CREATE statements (idempotent), then
// each added column its table lacks. Copies starting together may race to
// add one: a failed ALTER is forgiven when the column is there after all.
func (s *Store) Migrate(ctx context.Context) error {
	if s.cfg.Replicated {
		return s.migrateReplicas(ctx)
	}
	for _, stmt := range schema.Statements(s.db) {
		if err := s.pipe.conn().Exec(ctx, stmt); err != nil {
			return fmt.Errorf("apply schema: %w", err)
		}
	}
	return nil
}

// OnEachServer calls f with a Store for each server of CLICKHOUSE_URL and
// the name suffix of its tables that hold parts ("_local" when sharded),
// or, with one plain server, with s itself.
func (s *Store) OnEachServer(ctx context.Context, f func(st *Store, suffix string) error) error {
	if !s.cfg.Replicated {
		return f(s, "")
	}
	suffix := ""
	if s.cfg.Cluster != "" {
		suffix = "_local"
	}
	for _, addr := range s.cfg.addrs {
		one := s.cfg
		one.addrs, one.quorum, one.Replicated, one.Cluster, one.ReadUser = []string{addr}, 0, false, "", ""
		st, err := Open(one)
		if err != nil {
			return err
		}
		err = f(st, suffix)
		_ = st.Close()
		if err != nil {
			return fmt.Errorf("on %s: %w", addr, err)
		}
	}
	return nil
}

// migrateReplicas creates the replicated tables on every address: each
// replica registers itself in ZooKeeper.
func (s *Store) migrateReplicas(ctx context.Context) error {
	stmts := schema.Replicated(s.db)
	if s.cfg.Cluster != "" {
		stmts = schema.Sharded(s.db, s.cfg.Cluster)
	}
	return s.OnEachServer(ctx, func(st *Store, _ string) error {
		for _, stmt := range stmts {
			if err := st.pipe.conn().Exec(ctx, stmt); err != nil {
				return fmt.Errorf("apply the replicated schema: %w", err)
			}
		}
		return nil
	})
}

// Ping checks that ClickHouse answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pipe.use(func(c driver.Conn) error { return c.Ping(ctx) }); err != nil {
		return fmt.Errorf("clickhouse ping: %w", err)
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() error {
	if s.cfg.ReadUser != "" {
		s.reads.close()
	}
	s.pipe.close()
	return nil
}

// Conn exposes the current replica's pool to tests of this program that
// check rows directly.
func (s *Store) Conn() driver.Conn { return s.pipe.conn() }

// Failovers counts the moves from one replica to the next, of the
// pipeline's pools and of the workspace reads' when they are apart.
func (s *Store) Failovers() uint64 {
	n := s.pipe.moves.Load()
	if s.reads != s.pipe {
		n += s.reads.moves.Load()
	}
	return n
}
