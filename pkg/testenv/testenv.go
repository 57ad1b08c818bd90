// Package testenv gives integration tests the real servers they run against:
// an in-process NATS JetStream server from the nats-server module, and the
// ClickHouse server that `make test` starts for the run.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats-server/v2/server"
)

// ClickHouseEnv names the variable holding the test server's native address.
const ClickHouseEnv = "CLICKHOUSE_TEST_ADDR"

// NATS starts a JetStream-enabled server on a free loopback port, stopped
// when the test ends, and returns it.
func NATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		MaxPayload: 8 << 20, // as deploy/nats/nats.conf
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// ClickHouseAddr returns the address of the ClickHouse server for this run.
// Integration tests fail, never skip, without one: `make test` starts it.
func ClickHouseAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(ClickHouseEnv)
	if addr == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, which starts a ClickHouse server", ClickHouseEnv)
	}
	return addr
}

// ClickHouseDB returns a fresh database name on the test server, dropped when
// the test ends, so tests never see each other's rows.
func ClickHouseDB(t testing.TB) (addr, db string) {
	t.Helper()
	addr = ClickHouseAddr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	db = "test_" + hex.EncodeToString(b[:])
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatalf("clickhouse: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s", db)); err != nil {
			t.Logf("drop %s: %v", db, err)
		}
		_ = conn.Close()
	})
	return addr, db
}
