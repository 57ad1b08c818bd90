// Package chstore is writer-worker's ClickHouse access: schema, batch
// inserts of values and raw messages, and the workspace read queries.
package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

// Config is how to reach ClickHouse.
type Config struct {
	// URL is clickhouse://user@host:port[,host:port...]/database[?secure=true]
	// [&insert_quorum=n]: one address, or the replicas of one shard
	// (connections go to the first that answers, and to the next when it
	// fails), TLS, and an insert quorum other than the default.
	URL      string
	Password string
	// ReadUser and ReadPassword answer the workspace API's reads: a user
	// that may not write, with bounded time and memory (empty: the URL's).
	ReadUser     string
	ReadPassword string
	// Replicated: the tables are ReplicatedReplacingMergeTree (one shard),
	// created on every address.
	Replicated bool
	// Cluster, when set, shards the tables over that cluster of the
	// servers' remote_servers: replicated <table>_local tables on every
	// server, Distributed tables under the table names, inserted into
	// synchronously. Needs Replicated.
	Cluster string

	// Parsed from URL (Parse).
	addrs    []string
	quorum   int // -1: derived (see Quorum)
	Database string
	User     string
	TLS      bool
}

// Fixed pool settings: connect timeout, read timeout (also the insert
// quorum's timeout), and connections per pool.
const (
	dialTimeout = 5 * time.Second
	readTimeout = 30 * time.Second
	maxConns    = 8
)

// Quorum is the insert quorum: the URL's insert_quorum, else a majority of
// the replicas of one shard (2 of 3, which survives the loss of any one),
// else the server's default (sharded: give insert_quorum).
// With a quorum, reads ask for sequential consistency, so that they see
// every acknowledged insert whichever replica answers.
func (c Config) Quorum() int {
	if c.quorum >= 0 {
		return c.quorum
	}
	if n := len(c.addrs); c.Replicated && c.Cluster == "" && n > 1 {
		return n/2 + 1
	}
	return 0
}

// Addrs are the addresses in the URL.
func (c Config) Addrs() []string { return c.addrs }

// Where is where the store writes: its addresses and database.
func (s *Store) Where() (addrs []string, database string) { return s.cfg.addrs, s.db }

// Register adds the ClickHouse settings.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.URL, "clickhouse-url", "clickhouse://default@127.0.0.1:9000/device_events", "clickhouse://user@host:port[,host:port...]/database[?secure=true]: the native protocol address, or the replicas of one shard (the writer uses the first that answers and moves on when it fails), the user that creates the tables and inserts, the database, TLS")
	s.String(&c.Password, "clickhouse-password", "", "password of CLICKHOUSE_URL's user")
	s.String(&c.ReadUser, "clickhouse-read-user", "", "ClickHouse user of the workspace reads: readonly, with max_execution_time and max_memory_usage in its profile (empty: CLICKHOUSE_URL's user; deploy/clickhouse/server.sh makes ingest_reader)")
	s.String(&c.ReadPassword, "clickhouse-read-password", "", "password of CLICKHOUSE_READ_USER")
	s.Bool(&c.Replicated, "clickhouse-replicated", false, "the tables are ReplicatedReplacingMergeTree (one shard; servers need the {shard} and {replica} macros and ZooKeeper): created on every address of CLICKHOUSE_URL, inserts wait for a majority of them")
	s.String(&c.Cluster, "clickhouse-cluster", "", "shard the tables over this cluster of the servers' remote_servers (replicated local tables, Distributed tables in front, synchronous inserts; CLICKHOUSE_URL lists every server); empty: one shard")
}

// Parse reads URL into the addresses, user, database and TLS.
func (c *Config) Parse() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return errors.New("CLICKHOUSE_URL is not a URL") // its text may hold a password
	case u.Scheme != "clickhouse" || u.Host == "":
		return errors.New("CLICKHOUSE_URL must be clickhouse://user@host:port/database")
	}
	if _, set := u.User.Password(); set {
		return errors.New("CLICKHOUSE_URL must not hold a password: set CLICKHOUSE_PASSWORD")
	}
	c.addrs = nil
	for _, a := range strings.Split(u.Host, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	c.User, c.Database = u.User.Username(), strings.Trim(u.Path, "/")
	if c.User == "" {
		c.User = "default"
	}
	c.TLS = u.Query().Get("secure") == "true"
	c.quorum = -1
	if q := u.Query().Get("insert_quorum"); q != "" {
		if c.quorum, err = strconv.Atoi(q); err != nil || c.quorum < 0 {
			return errors.New("CLICKHOUSE_URL's insert_quorum must be a number of replicas")
		}
	}
	return nil
}

// Validate reports the first thing wrong with c.
func (c Config) Validate() error {
	if err := c.Parse(); err != nil {
		return err
	}
	switch {
	case c.Database == "" || strings.ContainsAny(c.Database, "/`' "):
		return errors.New("CLICKHOUSE_URL must name a database: clickhouse://user@host:port/database")
	case c.Cluster != "" && !c.Replicated:
		return errors.New("CLICKHOUSE_CLUSTER needs CLICKHOUSE_REPLICATED")
	case c.quorum > 1 && !c.Replicated:
		return errors.New("an insert_quorum above 1 needs CLICKHOUSE_REPLICATED")
	}
	return nil
}

// Store holds the connection pools: one for the pipeline (inserts, its
// own checks), one for the workspace reads.
type Store struct {
	conn  driver.Conn
	reads driver.Conn
	db    string
	cfg   Config
}

// settingsConn adds query settings to every call: the insert quorum, and
// the sequential consistency that lets reads see every quorum insert.
type settingsConn struct {
	driver.Conn
	settings clickhouse.Settings
}

func (c settingsConn) with(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(c.settings))
}

func (c settingsConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	return c.Conn.Query(c.with(ctx), q, args...)
}

func (c settingsConn) QueryRow(ctx context.Context, q string, args ...any) driver.Row {
	return c.Conn.QueryRow(c.with(ctx), q, args...)
}

func (c settingsConn) Exec(ctx context.Context, q string, args ...any) error {
	return c.Conn.Exec(c.with(ctx), q, args...)
}

func (c settingsConn) PrepareBatch(ctx context.Context, q string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	return c.Conn.PrepareBatch(c.with(ctx), q, opts...)
}

// Open connects (lazily: the pools dial on first use) and returns a Store.
func Open(cfg Config) (*Store, error) {
	if cfg.addrs == nil {
		if err := cfg.Parse(); err != nil {
			return nil, err
		}
	}
	conn, err := open(cfg, cfg.User, cfg.Password)
	if err != nil {
		return nil, err
	}
	reads := conn
	if cfg.ReadUser != "" {
		if reads, err = open(cfg, cfg.ReadUser, cfg.ReadPassword); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	return &Store{conn: conn, reads: reads, db: cfg.Database, cfg: cfg}, nil
}

func open(cfg Config, user, password string) (driver.Conn, error) {
	opts := &clickhouse.Options{
		Addr:             cfg.Addrs(),
		Auth:             clickhouse.Auth{Database: "default", Username: user, Password: password},
		DialTimeout:      dialTimeout,
		ReadTimeout:      readTimeout,
		MaxOpenConns:     maxConns,
		MaxIdleConns:     maxConns,
		ConnMaxLifetime:  time.Hour,
		ConnOpenStrategy: clickhouse.ConnOpenInOrder,
	}
	if cfg.TLS {
		opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse: %w", err)
	}
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
	if len(settings) > 0 {
		conn = settingsConn{Conn: conn, settings: settings}
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
		if err := s.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("apply schema: %w", err)
		}
	}
	for _, c := range schema.Added(s.db) {
		has, err := s.hasColumn(ctx, c.Table, c.Name)
		if err != nil || has {
			if err != nil {
				return err
			}
			continue
		}
		if err := s.conn.Exec(ctx, c.Add); err != nil {
			if has, _ := s.hasColumn(ctx, c.Table, c.Name); !has {
				return fmt.Errorf("add column %s.%s: %w", c.Table, c.Name, err)
			}
		}
	}
	return nil
}

// migrateReplicas creates the replicated tables on every address: each
// replica registers itself in ZooKeeper. (Their columns are all in the
// CREATE statements; an ALTER would replicate from one replica.)
func (s *Store) migrateReplicas(ctx context.Context) error {
	for _, addr := range s.cfg.Addrs() {
		one := s.cfg
		one.addrs, one.quorum, one.Replicated, one.Cluster = []string{addr}, 0, false, ""
		st, err := Open(one)
		if err != nil {
			return err
		}
		stmts := schema.Replicated(s.db)
		if s.cfg.Cluster != "" {
			stmts = schema.Sharded(s.db, s.cfg.Cluster)
		}
		for _, stmt := range stmts {
			if err = st.conn.Exec(ctx, stmt); err != nil {
				break
			}
		}
		_ = st.Close()
		if err != nil {
			return fmt.Errorf("apply the replicated schema on %s: %w", addr, err)
		}
	}
	return nil
}

func (s *Store) hasColumn(ctx context.Context, table, column string) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?", s.db, table, column).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read columns of %s: %w", table, err)
	}
	return n > 0, nil
}

// Ping checks that ClickHouse answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("clickhouse ping: %w", err)
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() error {
	if s.cfg.ReadUser != "" {
		_ = s.reads.Close()
	}
	return s.conn.Close()
}

// Conn exposes the pool to tests of this program that check rows directly.
func (s *Store) Conn() driver.Conn { return s.conn }
