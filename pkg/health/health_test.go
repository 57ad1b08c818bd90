package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/devicehub/eventservice/integration/testenv"
)

// start runs s on a free loopback port until the test ends and returns
// its address once it answers.
func start(t *testing.T, s *Server) string {
	t.Helper()
	s.addr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", s.addr)
		if err == nil {
			_ = c.Close()
			return s.addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("health server not listening: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A connection left idle after its request is closed: a stranger's idle
// keep-alives cannot pile up on the operations port of every program.
func TestIdleConnectionsAreClosed(t *testing.T) {
	s := New("", func(context.Context) error { return nil })
	s.timeouts.idle = 200 * time.Millisecond
	addr := start(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection after 10 s: %v, want it closed by the server (EOF)", err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
