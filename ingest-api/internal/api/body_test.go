package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/registry"
)

// writeThenRead posts a body of n bytes the way Python's urllib and many
// embedded stacks do: the whole request is written before anything is read.
func writeThenRead(t *testing.T, addr string, n int, contentLength bool) (*http.Response, []byte, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	head := "POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	if contentLength {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", n)
	} else {
		head += "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", n)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		return nil, nil, err
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := conn.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
			return nil, nil, fmt.Errorf("write after %d bytes: %w", sent, err)
		}
	}
	if !contentLength {
		if _, err := io.WriteString(conn, "\r\n0\r\n\r\n"); err != nil {
			return nil, nil, err
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// A client that writes its whole 12 MiB body (more than loopback socket
// buffers hold) before reading gets the 413
// JSON answer, with a declared length and chunked alike.
func TestOversizedBodyWrittenFirstGetsThe413(t *testing.T) {
	e, _ := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{},
		Limits: Limits{MaxBodyBytes: 1 << 20, DiscardBytes: 16 << 20, MaxInFlight: 4}})
	srv := httptest.NewServer(e)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, declared := range []bool{true, false} {
		resp, raw, err := writeThenRead(t, addr, 12<<20, declared)
		if err != nil {
			t.Fatalf("content-length %v: %v", declared, err)
		}
		var b Body
		if err := json.Unmarshal(raw, &b); err != nil || resp.StatusCode != 413 || b.Message != "Payload too large" || b.Error != "Request body exceeds the limit" {
			t.Fatalf("content-length %v: %d %q (%v)", declared, resp.StatusCode, raw, err)
		}
	}
}

// Past the discard bound the connection is closed after the answer rather
// than read forever.
func TestBodyBeyondTheDiscardBoundClosesTheConnection(t *testing.T) {
	e, _ := New(Deps{Log: zap.NewNop(), Registry: &registry.Store{},
		Limits: Limits{MaxBodyBytes: 1 << 10, DiscardBytes: 64 << 10, MaxInFlight: 4}})
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/deviceapi/event", "application/json", strings.NewReader(strings.Repeat("a", 32<<10)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || resp.Close {
		t.Fatalf("within the bound: %d, close %v; want 413 on a connection kept open", resp.StatusCode, resp.Close)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<30)
	go func() { // a sender that never stops
		chunk := make([]byte, 64<<10)
		for {
			if _, err := conn.Write(chunk); err != nil {
				return
			}
		}
	}()
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 413 || !r.Close {
		t.Fatalf("beyond the bound: %d, close %v; want 413 and the connection closed", r.StatusCode, r.Close)
	}
}
