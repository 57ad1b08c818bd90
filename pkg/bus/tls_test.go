package bus_test

import (
	"context"
	"crypto/tls"
	"github.com/devicehub/eventservice/pkg/bus"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// A program reaches a NATS server that requires TLS with a client
// certificate, given NATS_TLS_CA, NATS_TLS_CERT and NATS_TLS_KEY; without
// the client certificate it does not get in.
func TestConnectWithMutualTLS(t *testing.T) {
	p := testenv.NewPKI(t)
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		TLS: true, TLSVerify: true, TLSTimeout: 2,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	cfg := bus.Config{URL: "tls://" + srv.Addr().String(), TLSCAFile: p.CAFile, TLSCert: p.ClientCert, TLSKey: p.ClientKey,
		Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 20, Prefix: bus.DefaultPrefix}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, _, err := bus.Open(ctx, cfg, "tls-test", zap.NewNop())
	if err != nil {
		t.Fatalf("open over mutual TLS: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection is not TLS")
	}
	nc.Close()

	noCert := cfg
	noCert.TLSCert, noCert.TLSKey = "", ""
	nc2, _, err := bus.Connect(noCert, "tls-test-nocert", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	if err := bus.WaitConnected(wctx, nc2); err == nil {
		t.Fatal("connected without a client certificate")
	}
}
