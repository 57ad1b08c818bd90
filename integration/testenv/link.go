package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Link is a TCP relay on loopback in front of one listening address that
// delays what it carries, each way, by a delay the test sets and changes
// while connections are open: the network delay that netem would add,
// which this machine's kernel lacks. Bytes keep their order and the link
// keeps its throughput (what arrives is queued with the time it is due);
// a link stalls its sender only beyond 4 MiB queued on one connection one
// way. Closing either side closes the other once what was queued is out.
type Link struct {
	ln      net.Listener
	target  string
	delay   atomic.Int64 // one way, ns
	delayed atomic.Int64 // chunks that waited for the delay
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
}

// NewLink listens on a free loopback port and relays every connection to
// target, without delay until SetDelay; it is closed when the test ends.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(l.close)
	return l
}

// Addr is the link's own address (host:port).
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Port is the link's own port.
func (l *Link) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// SetDelay sets the one-way delay of what the link receives from now on.
func (l *Link) SetDelay(d time.Duration) { l.delay.Store(int64(d)) }

// Delayed counts the chunks of bytes that waited for a delay: proof that
// the delay was done.
func (l *Link) Delayed() int64 { return l.delayed.Load() }

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", l.target, 5*time.Second)
		if err != nil || !l.track(in, out) {
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		l.wg.Add(2)
		go l.pipe(in, out)
		go l.pipe(out, in)
	}
}

// track records an open pair so that close can end it (false: the link is
// closed).
func (l *Link) track(a, b net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[a], l.conns[b] = struct{}{}, struct{}{}
	return true
}

// chunk is bytes read and the time they are due on the other side.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies from src to dst, each read written once its delay has
// passed, and in the order read.
func (l *Link) pipe(src, dst net.Conn) {
	defer l.wg.Done()
	queue := make(chan chunk, 128) // of up to 32 KiB: 4 MiB
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			if wait := time.Until(c.due); wait > 0 {
				l.delayed.Add(1)
				time.Sleep(wait)
			}
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		// Closing ends both pipes: dst's reader in the other pipe fails
		// too. A half close would be truer; nothing here needs it.
		dst.Close()
		src.Close()
		for range queue { // let the reader finish
		}
	}()
	var last time.Time
	for {
		b := make([]byte, 32<<10)
		n, err := src.Read(b)
		if n > 0 {
			due := time.Now().Add(time.Duration(l.delay.Load()))
			if due.Before(last) { // the delay was shortened: keep the order
				due = last
			}
			last = due
			queue <- chunk{b: b[:n], due: due}
		}
		if err != nil { // EOF, or either side closed or reset
			break
		}
	}
	close(queue)
	<-done
	l.mu.Lock()
	delete(l.conns, src)
	l.mu.Unlock()
}

// close stops accepting and ends every connection.
func (l *Link) close() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
}
