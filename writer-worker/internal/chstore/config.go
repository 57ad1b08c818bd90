package chstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// Config is how to reach ClickHouse.
type Config struct {
	// URL is clickhouse://user@host:port[,host:port...]/database[?secure=true]
	// [&tls_ca=FILE][&tls_cert=FILE&tls_key=FILE][&insert_quorum=n]: one
	// address, or the replicas of one shard (the first is used until it
	// cannot serve, then the next: see replicas), TLS, and an insert
	// quorum other than the default.
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
	// tls_ca verifies the servers (empty: the system's roots); tls_cert
	// and tls_key are a client certificate for servers that ask for one.
	TLSCAFile, TLSCert, TLSKey string
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

// Where is where the store writes: its addresses and database.
func (s *Store) Where() (addrs []string, database string) { return s.cfg.addrs, s.db }

// Register adds the ClickHouse settings.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.URL, "clickhouse-url", "clickhouse://default@127.0.0.1:9000/device_events", "clickhouse://user@host:port[,host:port...]/database[?secure=true[&tls_ca=FILE][&tls_cert=FILE&tls_key=FILE]]: the native protocol address, or the replicas of one shard (the writer uses the first that answers and moves on when it fails), the user that creates the tables and inserts, the database, TLS (the CA that verifies the servers, a client certificate)")
	s.Secret(&c.Password, "clickhouse-password", "password of CLICKHOUSE_URL's user")
	s.String(&c.ReadUser, "clickhouse-read-user", "", "ClickHouse user of the workspace reads: readonly, with max_execution_time and max_memory_usage in its profile (empty: CLICKHOUSE_URL's user; deploy/clickhouse/server.sh makes ingest_reader)")
	s.Secret(&c.ReadPassword, "clickhouse-read-password", "password of CLICKHOUSE_READ_USER")
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
	q := u.Query()
	c.TLS = q.Get("secure") == "true"
	c.TLSCAFile, c.TLSCert, c.TLSKey = q.Get("tls_ca"), q.Get("tls_cert"), q.Get("tls_key")
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
	case c.Database == "":
		return errors.New("CLICKHOUSE_URL must name a database: clickhouse://user@host:port/database")
	case !identifier(c.Database, ""):
		// It is written into every query unquoted: "device-events" would
		// pass here and fail every statement.
		return errors.New("CLICKHOUSE_URL's database must be letters, digits and '_', not starting with a digit")
	case !identifier(c.Cluster, "-.") && c.Cluster != "":
		return errors.New("CLICKHOUSE_CLUSTER must be letters, digits, '_', '-' and '.'")
	case c.Cluster != "" && !c.Replicated:
		return errors.New("CLICKHOUSE_CLUSTER needs CLICKHOUSE_REPLICATED")
	case c.quorum > 1 && !c.Replicated:
		return errors.New("an insert_quorum above 1 needs CLICKHOUSE_REPLICATED")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("CLICKHOUSE_URL's tls_cert and tls_key go together")
	case !c.TLS && c.TLSCAFile+c.TLSCert != "":
		return errors.New("CLICKHOUSE_URL's tls_ca, tls_cert and tls_key need secure=true")
	}
	_, err := c.tlsConfig()
	return err
}

// tlsConfig is the connections' TLS: nil without secure=true.
func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("CLICKHOUSE_URL's tls_ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("CLICKHOUSE_URL's tls_ca holds no PEM certificate")
		}
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, errors.New("CLICKHOUSE_URL's tls_cert and tls_key: not a certificate and its key") // the error may quote the key
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// identifier reports whether s is a name written into statements as it
// is: letters, digits, '_' and the bytes of extra, not starting with a
// digit.
func identifier(s, extra string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', strings.ContainsRune(extra, r) && r < 0x80:
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}
