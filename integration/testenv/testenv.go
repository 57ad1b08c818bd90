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
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
)

// ClickHouseEnv names the variable holding the test server's native address.
const ClickHouseEnv = "CLICKHOUSE_TEST_ADDR"

// NATS starts a JetStream-enabled server on a free loopback port, stopped
// when the test ends, and returns it.
func NATS(t testing.TB) *server.Server {
	return NATSControl(t).Server()
}

// Connect starts a server as NATS does and returns a connection to it (as
// the operator) and its JetStream context; the connection closes when the
// test ends.
func Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return operatorConn(t, NATS(t).ClientURL())
}

// NATSServer is an in-process server that a test can stop and start again on
// the same port and store, as an operator restarts one.
type NATSServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

// NATSPassword is the password of a NATS user (a program's name, or
// "operator") on the test servers.
func NATSPassword(user string) string { return "test-nats-" + user }

// Operator connects as the operator, who may do anything.
func Operator() nats.Option { return nats.UserInfo("operator", NATSPassword("operator")) }

// OperatorJS connects to the servers at url (comma separated) as the
// operator, for a test to set up or inspect streams and buckets; the
// connection closes when the test ends.
func OperatorJS(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	_, js := operatorConn(t, url)
	return js
}

// operatorConn connects to url as the operator until the test ends.
func operatorConn(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, Operator())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// natsUsers are the deployment's users (pkg/bus.Users, as
// deploy/nats/auth.conf has them) for names.
func natsUsers(names bus.Names) []*server.User {
	var out []*server.User
	for _, u := range bus.Users(names) {
		p := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: u.Publish},
			Subscribe: &server.SubjectPermission{Allow: u.Subscribe},
		}
		if u.Responds {
			p.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
		}
		out = append(out, &server.User{Username: u.Name, Password: NATSPassword(u.Name), Permissions: p})
	}
	return out
}

// RegistryBucket is the registry's bucket on the test servers.
var RegistryBucket = bus.DefaultNames.RegistryBucket

// NATSControl starts a restartable JetStream server, stopped when the test
// ends, with the deployment's users and permissions for the default names.
func NATSControl(t testing.TB) *NATSServer { return NATSControlFor(t, bus.DefaultNames) }

// NATSControlFor starts a restartable server whose users' permissions are
// for names.
func NATSControlFor(t testing.TB, names bus.Names) *NATSServer {
	t.Helper()
	return NATSControlWith(t, names, nil)
}

// NATSControlWith is NATSControlFor with options changed by change (nil:
// none), such as where JetStream stores.
func NATSControlWith(t testing.TB, names bus.Names, change func(*server.Options)) *NATSServer {
	t.Helper()
	n := &NATSServer{t: t, opts: server.Options{
		Host: "127.0.0.1", Port: FreePort(t), JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		MaxPayload: 8 << 20, // as deploy/nats/nats.conf
		Users:      natsUsers(names),
	}}
	if change != nil {
		change(&n.opts)
	}
	n.Start()
	n.opts.Port = n.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(n.Stop)
	return n
}

// Server is the running server.
func (n *NATSServer) Server() *server.Server { return n.srv }

// Start starts the server (again) and waits until it takes connections.
func (n *NATSServer) Start() {
	n.t.Helper()
	n.StartAsync()
	n.WaitReady()
}

// StartAsync starts the server without waiting: cluster nodes must all be
// starting before any of them is ready.
func (n *NATSServer) StartAsync() {
	n.t.Helper()
	opts := n.opts
	s, err := server.NewServer(&opts)
	if err != nil {
		n.t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	n.srv = s
}

// WaitReady waits until the server takes connections.
func (n *NATSServer) WaitReady() {
	n.t.Helper()
	if !n.srv.ReadyForConnections(20 * time.Second) {
		n.t.Fatal("nats server not ready")
	}
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

// NATSCluster starts n JetStream servers on loopback that form one cluster
// (as a production R3 deployment does), each restartable on its own ports and
// store, all stopped when the test ends. It returns once JetStream has a meta
// leader, so that replicated streams can be created.
func NATSCluster(t testing.TB, n int) []*NATSServer {
	t.Helper()
	clusterPorts := make([]int, n)
	clientPorts := make([]int, n)
	for i := range n {
		clusterPorts[i], clientPorts[i] = FreePort(t), FreePort(t)
	}
	var routes []*url.URL
	for _, p := range clusterPorts {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	nodes := make([]*NATSServer, n)
	for i := range n {
		nodes[i] = &NATSServer{t: t, opts: server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1", Port: clientPorts[i], JetStream: true, StoreDir: t.TempDir(),
			NoSigs: true, NoLog: true, MaxPayload: 8 << 20, Users: natsUsers(bus.DefaultNames),
			Cluster: server.ClusterOpts{Name: "events", Host: "127.0.0.1", Port: clusterPorts[i]},
			Routes:  routes,
		}}
	}
	for _, node := range nodes {
		node.StartAsync()
	}
	for _, node := range nodes {
		node.WaitReady()
		t.Cleanup(node.Stop)
	}
	waitReplicated(t, nodes[0].ClientURL(), n)
	return nodes
}

// ClientURL is the server's client address.
func (n *NATSServer) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port) }
