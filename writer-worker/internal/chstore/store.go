// Package chstore is writer-worker's ClickHouse access: schema, batch
// inserts of values and raw messages, and the workspace read queries.
package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

// Config is how to reach ClickHouse.
type Config struct {
	Addr        string
	Database    string
	User        string
	Password    string
	TLS         bool
	DialTimeout time.Duration
	ReadTimeout time.Duration
	MaxConns    int
}

// Register adds the ClickHouse settings.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.Addr, "clickhouse-addr", "127.0.0.1:9000", "ClickHouse native protocol address")
	s.String(&c.Database, "clickhouse-database", "device_events", "database holding the service's tables")
	s.String(&c.User, "clickhouse-user", "default", "ClickHouse user")
	s.String(&c.Password, "clickhouse-password", "", "ClickHouse password")
	s.Bool(&c.TLS, "clickhouse-tls", false, "connect to ClickHouse over TLS")
	s.Duration(&c.DialTimeout, "clickhouse-dial-timeout", 5*time.Second, "ClickHouse connect timeout")
	s.Duration(&c.ReadTimeout, "clickhouse-read-timeout", 30*time.Second, "ClickHouse read timeout")
	s.Int(&c.MaxConns, "clickhouse-max-conns", 8, "ClickHouse connections in the pool")
}

// Validate reports the first thing wrong with c.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("CLICKHOUSE_ADDR is empty")
	case c.Database == "":
		return errors.New("CLICKHOUSE_DATABASE is empty")
	case c.DialTimeout <= 0 || c.ReadTimeout <= 0:
		return errors.New("CLICKHOUSE timeouts must be positive")
	case c.MaxConns < 2:
		return errors.New("CLICKHOUSE_MAX_CONNS must be at least 2")
	}
	return nil
}

// Store holds the connection pool.
type Store struct {
	conn driver.Conn
	db   string
}

// Open connects (lazily: the pool dials on first use) and returns a Store.
func Open(cfg Config) (*Store, error) {
	opts := &clickhouse.Options{
		Addr:             []string{cfg.Addr},
		Auth:             clickhouse.Auth{Database: "default", Username: cfg.User, Password: cfg.Password},
		DialTimeout:      cfg.DialTimeout,
		ReadTimeout:      cfg.ReadTimeout,
		MaxOpenConns:     cfg.MaxConns,
		MaxIdleConns:     cfg.MaxConns,
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
	return &Store{conn: conn, db: cfg.Database}, nil
}

// Migrate applies the schema: the CREATE statements (idempotent), then
// each added column its table lacks. Copies starting together may race to
// add one: a failed ALTER is forgiven when the column is there after all.
func (s *Store) Migrate(ctx context.Context) error {
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
func (s *Store) Close() error { return s.conn.Close() }

// Conn exposes the pool to tests of this program that check rows directly.
func (s *Store) Conn() driver.Conn { return s.conn }
