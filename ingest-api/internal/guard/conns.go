package guard

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Conns is a listener that bounds open connections per client address and
// in all. A connection over either bound is answered at once with a short
// JSON refusal (429 or 503, Connection: close) and closed, rather than
// left in the accept queue where it would hold up honest clients.
type Conns struct {
	net.Listener
	perSource int
	max       int
	proxies   Proxies
	tls       bool // refusals are plain HTTP: under TLS a refused connection is only closed

	mu      sync.Mutex
	open    map[netip.Addr]int
	total   int
	refusal chan struct{} // bounds the goroutines writing refusals

	refusedSource, refusedTotal atomic.Uint64
}

// Refusals are the raw HTTP answers to a connection over a bound: written
// before its request is read, so they cannot depend on it.
var (
	refuseSource = rawAnswer(outcome.TooManyConns)
	refuseTotal  = rawAnswer(outcome.ConnsExhausted)
)

func rawAnswer(code outcome.Code) []byte {
	row := outcome.Lookup(code)
	body, err := json.Marshal(struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}{false, row.Message, row.Error("", "")})
	if err != nil {
		panic(err)
	}
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
		row.Status, http.StatusText(row.Status), row.RetryAfter, len(body)+1, body)
}

// Listen wraps ln (tls: ln's connections will carry TLS). Connections from
// trusted proxies count toward the total only: a proxy carries many
// clients.
func Listen(ln net.Listener, perSource, max int, proxies Proxies, tls bool) *Conns {
	return &Conns{Listener: ln, perSource: perSource, max: max, proxies: proxies, tls: tls,
		open: make(map[netip.Addr]int), refusal: make(chan struct{}, 64)}
}

// Accept returns the next connection within the bounds, refusing those
// beyond them.
func (l *Conns) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := Source(peerAddr(c.RemoteAddr().String()))
		proxy := l.proxies.trusted(src)
		l.mu.Lock()
		switch {
		case l.total >= l.max:
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			l.refuse(c, refuseTotal)
			continue
		case !proxy && l.open[src] >= l.perSource:
			l.mu.Unlock()
			l.refusedSource.Add(1)
			l.refuse(c, refuseSource)
			continue
		}
		l.total++
		if !proxy {
			l.open[src]++
		}
		l.mu.Unlock()
		return &conn{Conn: c, l: l, src: src, counted: !proxy}, nil
	}
}

// refuse answers c and closes it. The request is read and dropped for a
// moment first, so that the close does not reset the connection under a
// client still writing; when many refusals are under way, c is just closed.
func (l *Conns) refuse(c net.Conn, answer []byte) {
	if l.tls {
		_ = c.Close()
		return
	}
	select {
	case l.refusal <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusal }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		var buf [4096]byte
		_, _ = c.Read(buf[:])
		if _, err := c.Write(answer); err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}()
}

// Stats returns the connections open now and the refusals so far, per
// address and for the total.
func (l *Conns) Stats() (open int, refusedSource, refusedTotal uint64) {
	l.mu.Lock()
	open = l.total
	l.mu.Unlock()
	return open, l.refusedSource.Load(), l.refusedTotal.Load()
}

func (l *Conns) release(src netip.Addr, counted bool) {
	l.mu.Lock()
	l.total--
	if counted {
		if l.open[src] <= 1 {
			delete(l.open, src)
		} else {
			l.open[src]--
		}
	}
	l.mu.Unlock()
}

type conn struct {
	net.Conn
	l       *Conns
	src     netip.Addr
	counted bool
	once    sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c.src, c.counted) })
	return c.Conn.Close()
}
