package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// conn is one keep-alive HTTP/1.1 connection that sends pre-rendered
// requests and reads just enough of each answer: status and body. Cheaper
// than net/http's client, so that the generator leaves the CPU to the service.
type conn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

// dials counts connections, so that they come from a fleet of loopback
// addresses (127.0.1.1 up to 127.0.1.250), as a fleet's devices do, rather
// than all from one, which the per-address connection bound would refuse.
// LOADGEN_SOURCES=1 dials from the default address only (then raise
// SOURCE_MAX_CONNS), as the generator did before.
var (
	dials   atomic.Uint64
	sources = func() uint64 {
		if n, err := strconv.ParseUint(os.Getenv("LOADGEN_SOURCES"), 10, 8); err == nil && n >= 1 && n <= 250 {
			return n
		}
		return 250
	}()
)

func dial(addr string) (*conn, error) {
	n := dials.Add(1)
	if sources > 1 {
		return dialFrom(addr, net.IPv4(127, 0, 1, byte(1+n%sources)))
	}
	return dialFrom(addr, nil)
}

// dialFrom connects to addr from the local address src (nil: the default).
func dialFrom(addr string, src net.IP) (*conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// request renders a POST of body to path with a bearer token.
func request(host, path, token string, body []byte) []byte {
	return append(fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n",
		path, host, token, len(body)), body...)
}

var successMark = []byte(`"success":true`)

// reply is what do reads of a response.
type reply struct {
	status     int
	ok         bool          // the body says success
	retryAfter time.Duration // from a Retry-After header, if any
	closed     bool          // the server closes the connection after this answer
}

// do sends req and reads the answer.
func (c *conn) do(req []byte, timeout time.Duration) (a reply, err error) {
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.c.Write(req); err != nil {
		return a, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return a, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return a, errors.New("bad status line")
	}
	if a.status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return a, err
	}
	length := -1
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return a, err
		}
		if len(h) <= 2 {
			break
		}
		if len(h) > 16 && bytes.EqualFold(h[:15], []byte("Content-Length:")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(h[15:]))); err != nil {
				return a, err
			}
		}
		if len(h) > 11 && bytes.EqualFold(h[:11], []byte("Connection:")) {
			a.closed = bytes.EqualFold(bytes.TrimSpace(h[11:]), []byte("close"))
		}
		if len(h) > 12 && bytes.EqualFold(h[:12], []byte("Retry-After:")) {
			if secs, err := strconv.Atoi(string(bytes.TrimSpace(h[12:]))); err == nil {
				a.retryAfter = time.Duration(secs) * time.Second
			}
		}
	}
	if length < 0 || length > 1<<20 {
		return a, errors.New("no usable Content-Length")
	}
	if cap(c.buf) < length {
		c.buf = make([]byte, length)
	}
	body := c.buf[:length]
	if _, err := io.ReadFull(c.r, body); err != nil {
		return a, err
	}
	a.ok = bytes.Contains(body, successMark)
	return a, nil
}

func (c *conn) close() { _ = c.c.Close() }

// withKey returns req with an Idempotency-Key header "<keyed>-<n>" after its
// request line, built in buf (reused by the caller); req itself is unchanged.
func withKey(buf, req []byte, keyed string, n int) []byte {
	line := bytes.IndexByte(req, '\n') + 1
	buf = append(append(buf[:0], req[:line]...), "Idempotency-Key: "...)
	buf = append(strconv.AppendInt(append(append(buf, keyed...), '-'), int64(n), 10), "\r\n"...)
	return append(buf, req[line:]...)
}
