package chstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// secureClickHouse starts a ClickHouse of the test's own (deploy/clickhouse/
// server.sh) with a TLS native port serving p's server certificate, and
// returns that port's address.
func secureClickHouse(t *testing.T, p testenv.PKI) string {
	t.Helper()
	dir, tcp, http, secure := t.TempDir(), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	cmd := exec.Command("../../../deploy/clickhouse/server.sh", "start", dir, fmt.Sprint(tcp), fmt.Sprint(http))
	cmd.Env = append(os.Environ(), "CLICKHOUSE_EXTRA_CONFIG="+fmt.Sprintf(`<tcp_port_secure>%d</tcp_port_secure>
  <openSSL><server><certificateFile>%s</certificateFile><privateKeyFile>%s</privateKeyFile>
    <verificationMode>none</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>
    <cacheSessions>true</cacheSessions><disableProtocols>sslv2,sslv3</disableProtocols><preferServerCiphers>true</preferServerCiphers>
  </server></openSSL>`, secure, p.ServerCert, p.ServerKey))
	t.Cleanup(func() { _ = exec.Command("../../../deploy/clickhouse/server.sh", "stop", dir).Run() })
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start ClickHouse: %v\n%s", err, out)
	}
	return fmt.Sprintf("127.0.0.1:%d", secure)
}

// writer-worker reaches a ClickHouse that serves TLS, given secure=true and
// CLICKHOUSE_URL's tls_ca; it does not get in without the CA that signed the
// server's certificate, nor in plain text.
func TestClickHouseOverTLS(t *testing.T) {
	p := testenv.NewPKI(t)
	addr := secureClickHouse(t, p)
	ping := func(cfg chstore.Config) error {
		if err := cfg.Validate(); err != nil {
			return err
		}
		st, err := chstore.Open(cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return st.Ping(ctx)
	}
	url := "clickhouse://default@" + addr + "/default?secure=true"
	secure := chstore.Config{URL: url + "&tls_ca=" + p.CAFile}
	if err := ping(secure); err != nil {
		t.Fatalf("over TLS with the CA: %v", err)
	}
	mutual := chstore.Config{URL: secure.URL + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey}
	if err := ping(mutual); err != nil {
		t.Fatalf("over TLS with a client certificate: %v", err)
	}
	noCA := chstore.Config{URL: url}
	if err := ping(noCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	plain := chstore.Config{URL: "clickhouse://default@" + addr + "/default"}
	if err := ping(plain); err == nil {
		t.Error("plain text to the TLS port got in")
	}
}
