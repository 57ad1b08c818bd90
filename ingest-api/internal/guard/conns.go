package guard

import (
	"container/list"
	"context"
	"crypto/tls"
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
// in all. A connection beyond its address's bound is answered at once with
// a short JSON refusal (429, Connection: close) and closed, rather than
// left in the accept queue where it would hold up honest clients. At the
// bound in all, the connection that has gone longest without a request
// being handled (idle keep-alive, or still sending its headers: what a
// slowloris holds) is closed to make room; only when every connection is
// handling a request is the newcomer refused (503).
type Conns struct {
	net.Listener
	perSource int
	max       int
	proxies   Proxies
	tls       bool // refusals are plain HTTP: under TLS a refused connection is only closed

	mu      sync.Mutex
	open    map[netip.Addr]int
	all     map[*conn]struct{} // every connection open
	unused  list.List          // connections that never had a request handled, oldest first
	refusal chan struct{}      // bounds the goroutines writing refusals

	refusedSource, refusedTotal, evicted atomic.Uint64
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
		open: make(map[netip.Addr]int), all: make(map[*conn]struct{}), refusal: make(chan struct{}, 64)}
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
		if !proxy && l.open[src] >= l.perSource {
			l.mu.Unlock()
			l.refusedSource.Add(1)
			l.refuse(c, refuseSource)
			continue
		}
		if len(l.all) >= l.max && !l.evictOne() {
			l.mu.Unlock()
			l.refusedTotal.Add(1)
			l.refuse(c, refuseTotal)
			continue
		}
		wc := &conn{Conn: c, l: l, src: src, counted: !proxy}
		wc.quiet.Store(time.Now().UnixNano())
		l.all[wc] = struct{}{}
		wc.unused = l.unused.PushBack(wc)
		if !proxy {
			l.open[src]++
		}
		l.mu.Unlock()
		return wc, nil
	}
}

// evictOne closes a connection that is not handling a request: one that
// never completed a request (a slowloris is always one) before one that
// did, and of those the one quiet longest. It counts as closed at once:
// its own Close, which follows, finds it gone. l.mu is held.
func (l *Conns) evictOne() bool {
	var victim *conn
	if e := l.unused.Front(); e != nil {
		victim = e.Value.(*conn)
	} else {
		for c := range l.all {
			if c.busy.Load() == 0 && (victim == nil || c.quiet.Load() < victim.quiet.Load()) {
				victim = c
			}
		}
	}
	if victim == nil {
		return false
	}
	l.forget(victim)
	l.evicted.Add(1)
	_ = victim.Conn.Close()
	return true
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

// ConnStats are the connections open now, the refusals so far (per
// address and for the total) and the idle connections closed to make room.
type ConnStats struct {
	Open                                 int
	RefusedSource, RefusedTotal, Evicted uint64
}

// Stats returns the listener's counts.
func (l *Conns) Stats() ConnStats {
	l.mu.Lock()
	open := len(l.all)
	l.mu.Unlock()
	return ConnStats{open, l.refusedSource.Load(), l.refusedTotal.Load(), l.evicted.Load()}
}

// forget drops c from the counts, once. l.mu is held.
func (l *Conns) forget(c *conn) {
	if _, ok := l.all[c]; !ok {
		return
	}
	delete(l.all, c)
	if c.unused != nil {
		l.unused.Remove(c.unused)
		c.unused = nil
	}
	if c.counted {
		if l.open[c.src] <= 1 {
			delete(l.open, c.src)
		} else {
			l.open[c.src]--
		}
	}
}

type conn struct {
	net.Conn
	l       *Conns
	src     netip.Addr
	counted bool
	busy    atomic.Int32  // requests being handled on it now
	served  atomic.Bool   // a request was handled on it
	quiet   atomic.Int64  // unix ns since when no request has been handled
	unused  *list.Element // in l.unused until its first request; under l.mu
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

type connKey struct{}

// ConnContext is the http.Server's ConnContext: it lets Busy find the
// connection a request came on.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if gc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// Busy marks the connection of the request whose context is ctx as
// handling it, until the returned func is called: a busy connection is
// never closed to make room.
func Busy(ctx context.Context) (done func()) {
	c, ok := ctx.Value(connKey{}).(*conn)
	if !ok {
		return func() {}
	}
	c.busy.Add(1)
	if !c.served.Swap(true) {
		c.l.mu.Lock()
		if c.unused != nil {
			c.l.unused.Remove(c.unused)
			c.unused = nil
		}
		c.l.mu.Unlock()
	}
	return func() {
		c.quiet.Store(time.Now().UnixNano())
		c.busy.Add(-1)
	}
}
