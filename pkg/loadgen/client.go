package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
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

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// request renders a POST of body to path with a bearer token.
func request(host, path, token string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n",
		path, host, token, len(body))
	b.Write(body)
	return b.Bytes()
}

var successMark = []byte(`"success":true`)

// do sends req and returns the status and whether the body says success.
func (c *conn) do(req []byte, timeout time.Duration) (status int, ok bool, err error) {
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.c.Write(req); err != nil {
		return 0, false, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, false, errors.New("bad status line")
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, false, err
	}
	length := -1
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		if len(h) <= 2 {
			break
		}
		if len(h) > 16 && bytes.EqualFold(h[:15], []byte("Content-Length:")) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(h[15:])))
			if err != nil {
				return 0, false, err
			}
		}
	}
	if length < 0 || length > 1<<20 {
		return 0, false, errors.New("no usable Content-Length")
	}
	if cap(c.buf) < length {
		c.buf = make([]byte, length)
	}
	body := c.buf[:length]
	if _, err := readFull(c.r, body); err != nil {
		return 0, false, err
	}
	return status, bytes.Contains(body, successMark), nil
}

func readFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (c *conn) close() { _ = c.c.Close() }
