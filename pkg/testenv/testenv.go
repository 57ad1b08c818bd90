// Package testenv gives integration tests the real servers they run against:
// an in-process NATS JetStream server from the nats-server module, and the
// ClickHouse server that `make test` starts for the run.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
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
	return NATSControl(t).Server()
}

// NATSServer is an in-process server that a test can stop and start again on
// the same port and store, as an operator restarts one.
type NATSServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

// NATSControl starts a restartable JetStream server, stopped when the test ends.
func NATSControl(t testing.TB) *NATSServer {
	t.Helper()
	n := &NATSServer{t: t, opts: server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		MaxPayload: 8 << 20, // as deploy/nats/nats.conf
	}}
	n.Start()
	n.opts.Port = n.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(n.Stop)
	return n
}

// Server is the running server.
func (n *NATSServer) Server() *server.Server { return n.srv }

// Start starts the server (again).
func (n *NATSServer) Start() {
	n.t.Helper()
	opts := n.opts
	s, err := server.NewServer(&opts)
	if err != nil {
		n.t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("nats server not ready")
	}
	n.srv = s
}

// Stop shuts the server down.
func (n *NATSServer) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
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

// ClickHouseDB returns the test server's address and a fresh database name
// on it, dropped when the test ends, so tests never see each other's rows.
func ClickHouseDB(t testing.TB) (addr, db string) {
	t.Helper()
	addr = ClickHouseAddr(t)
	return addr, FreshDB(t, addr)
}

// FreshDB names a database for this test on the server at addr and drops it
// when the test ends (the writer creates it).
func FreshDB(t testing.TB, addr string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := "test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
		if err != nil {
			return
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s", db)); err != nil {
			t.Logf("drop %s: %v", db, err)
		}
	})
	return db
}
