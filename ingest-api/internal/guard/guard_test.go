package guard

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// refusedBy is Fail's first answer: whether the address is now refused.
func refusedBy(f *Failures, a netip.Addr) bool {
	refused, _ := f.Fail(a)
	return refused
}

func TestFailuresRefuseAnAddressForTheRestOfItsWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewFailures(20, time.Minute)
	f.now = func() time.Time { return now }
	attacker, device := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")
	for i := 1; i < 20; i++ {
		if refusedBy(f, attacker) {
			t.Fatalf("refused after %d failures, want after 20", i)
		}
		now = now.Add(time.Second)
	}
	if _, refused := f.Refused(attacker); refused {
		t.Fatal("refused before the 20th failure")
	}
	if !refusedBy(f, attacker) {
		t.Fatal("the 20th failure in a minute does not refuse the address")
	}
	wait, refused := f.Refused(attacker)
	if !refused || wait != 41*time.Second {
		t.Fatalf("refused %v for %v, want 41s (the rest of the minute that began with the first failure)", refused, wait)
	}
	// A request that got by the door meanwhile is past the limit.
	if _, over := f.Fail(attacker); !over {
		t.Fatal("the 21st failure is not past the limit")
	}
	if wait, refused = f.Refused(attacker); !refused || wait != 41*time.Second {
		t.Fatalf("refused %v for %v, want 41s (the rest of the minute that began with the first failure)", refused, wait)
	}
	if _, refused := f.Refused(device); refused {
		t.Fatal("another address is refused")
	}
	now = now.Add(41 * time.Second)
	if _, refused := f.Refused(attacker); refused {
		t.Fatal("still refused once the window ended")
	}
	if refusedBy(f, attacker) {
		t.Fatal("a new window starts with one failure")
	}
}

func TestFailuresKeyIPv6ByItsSlash64(t *testing.T) {
	f := NewFailures(2, time.Minute)
	f.Fail(netip.MustParseAddr("2001:db8:1:2::1"))
	if !refusedBy(f, netip.MustParseAddr("2001:db8:1:2:ffff::9")) {
		t.Fatal("two addresses of one /64 count as one source")
	}
	if _, refused := f.Refused(netip.MustParseAddr("2001:db8:1:3::1")); refused {
		t.Fatal("another /64 is refused")
	}
}

func TestFailuresTableIsBounded(t *testing.T) {
	f := NewFailures(5, time.Minute)
	for i := range maxSources + 100 {
		f.Fail(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	// The 100 past the table count under their /24, 10.1.0.0/24.
	st := f.Stats()
	if tracked, untracked := st.Tracked, st.Untracked; tracked != maxSources+1 || untracked != 100 {
		t.Fatalf("tracked %d, untracked %d; want %d and 100", tracked, untracked, maxSources+1)
	}
}

// Once the table of addresses is full, an attack spread over new addresses
// is counted under their ranges, the /48 or /24, and refused there: the
// lockout does not fail open.
func TestFailuresPastTheTableCountUnderTheirRange(t *testing.T) {
	f := NewFailures(5, time.Minute)
	for i := range maxSources {
		f.Fail(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	for _, tc := range []struct {
		name                  string
		attacker              func(i int) netip.Addr
		sameRange, otherRange string
	}{
		{"IPv6: a new /64 of one /48 for each guess",
			func(i int) netip.Addr {
				return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 7, 0, byte(i), 15: 1})
			},
			"2001:db8:7:ffff::9", "2001:db8:8::1"},
		{"IPv4: a new address of one /24 for each guess",
			func(i int) netip.Addr { return netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}) },
			"192.0.2.250", "192.0.3.1"},
	} {
		refusedAt := 0
		for i := 1; i <= 30 && refusedAt == 0; i++ {
			if refused, _ := f.Fail(tc.attacker(i)); refused {
				refusedAt = i
			}
		}
		if refusedAt != 5 {
			t.Errorf("%s: refused after %d guesses, want 5 (0: never)", tc.name, refusedAt)
		}
		if _, refused := f.Refused(netip.MustParseAddr(tc.sameRange)); !refused {
			t.Errorf("%s: %s, in the attacker's range, is not refused", tc.name, tc.sameRange)
		}
		if _, refused := f.Refused(netip.MustParseAddr(tc.otherRange)); refused {
			t.Errorf("%s: %s, in another range, is refused", tc.name, tc.otherRange)
		}
	}
	if _, refused := f.Refused(netip.MustParseAddr("10.0.0.1")); refused {
		t.Error("a tracked address below its limit is refused")
	}
}

// However wide an attack, a failure is counted: each table full of live
// keys sends it to the next, wider range, and the last, the /8 or /16,
// cannot fill.
func TestFailuresFailClosed(t *testing.T) {
	f := NewFailures(3, time.Minute)
	start := f.now()
	for i := range len(f.tables) - 1 {
		for k := range maxSources {
			f.tables[i][netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i), byte(k >> 8), byte(k), 0}), 1+i)] = &window{start: start, count: 1}
		}
	}
	a := netip.MustParseAddr("2001:db8:1:2::3")
	for range 3 {
		f.Fail(a)
	}
	wait, refused := f.Refused(netip.MustParseAddr("2001:ffff::1")) // the same /16
	if !refused || wait <= 0 {
		t.Fatal("a failure past every full table is not counted under the /16")
	}
	if st := f.Stats(); st.Tracked != 3*maxSources+1 || st.Untracked != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestClientAddressFromTrustedProxiesOnly(t *testing.T) {
	ps, err := ParsePrefixes("10.0.0.0/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	proxies := Proxies(ps)
	for _, tc := range []struct {
		name, peer, xff, want string
		p                     Proxies
	}{
		{"no proxy configured: the header is not believed", "203.0.113.9:1234", "198.51.100.1", "203.0.113.9", nil},
		{"untrusted peer: the header is not believed", "203.0.113.9:1234", "198.51.100.1", "203.0.113.9", proxies},
		{"trusted peer: the nearest untrusted hop", "10.1.2.3:1234", "198.51.100.1, 203.0.113.5, 10.9.9.9", "203.0.113.5", proxies},
		{"trusted single address", "192.0.2.7:80", "198.51.100.1", "198.51.100.1", proxies},
		{"garbage in the header: the peer", "10.1.2.3:1234", "198.51.100.1, nonsense", "10.1.2.3", proxies},
		{"trusted peer without the header", "10.1.2.3:1234", "", "10.1.2.3", proxies},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := tc.p.Client(r).String(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := ParsePrefixes("10.0.0.0/33"); err == nil {
		t.Error("a bad range is accepted")
	}
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	if !b.Take(60) || b.Take(41) || !b.Take(40) || b.Used() != 100 {
		t.Fatalf("takes beyond the budget or refuses within it (used %d)", b.Used())
	}
	b.Give(60)
	if !b.Take(60) {
		t.Fatal("what was given back cannot be taken again")
	}
}

// A real listener: the connections of one address beyond its bound get the
// JSON 429 and are closed; another address is not affected, and a closed
// connection frees its place.
func TestConnsBoundPerSourceAndInAll(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(ln, 2, 3, nil, false)
	defer l.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	addr := ln.Addr().String()
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	get := func(c net.Conn) (*http.Response, string) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	defer a1.Close()
	defer a2.Close()
	for _, c := range []net.Conn{a1, a2} {
		if resp, _ := get(c); resp.StatusCode != 200 {
			t.Fatalf("within the bound: %d", resp.StatusCode)
		}
	}
	a3 := dial("127.0.0.1")
	defer a3.Close()
	resp, body := get(a3)
	var b struct {
		Success        bool
		Message, Error string
	}
	if err := json.Unmarshal([]byte(body), &b); err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" ||
		b.Message != "Rate limit exceeded" || b.Error != "Too many connections from this address" || !resp.Close {
		t.Fatalf("third connection of one address: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	b1 := dial("127.0.0.2")
	defer b1.Close()
	if resp, _ := get(b1); resp.StatusCode != 200 {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
	// At MAX_CONNS the connection quiet longest (a1) is closed to make room.
	b2 := dial("127.0.0.2")
	defer b2.Close()
	if resp, _ := get(b2); resp.StatusCode != 200 {
		t.Fatalf("beyond MAX_CONNS with idle connections: %d, want 200", resp.StatusCode)
	}
	_ = a1.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := a1.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection idle longest was not closed")
	}
	if st := l.Stats(); st.Open != 3 || st.Evicted != 1 {
		t.Fatalf("open %d, evicted %d; want 3 and 1", st.Open, st.Evicted)
	}
	if st := l.Stats(); st.RefusedSource != 1 || st.RefusedTotal != 0 {
		t.Fatalf("refusals counted %d per source, %d in all; want 1 and 0", st.RefusedSource, st.RefusedTotal)
	}
}

// When every connection is handling a request, a connection beyond
// MAX_CONNS is refused with the JSON 503.
func TestConnsRefuseWhenAllAreBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(ln, 5, 2, nil, false)
	defer l.Close()
	release := make(chan struct{})
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer Busy(r.Context())()
		<-release
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	defer close(release)
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	deadline := time.Now().Add(5 * time.Second)
	for busy := 0; busy < 2; {
		busy = 0
		l.mu.Lock()
		for c := range l.all {
			busy += int(c.busy.Load())
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("requests not in their handlers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(resp.Header.Get("Content-Type"), "json") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("beyond MAX_CONNS with every connection busy: %d, want the JSON 503", resp.StatusCode)
	}
}

// At MAX_CONNS a connection that never sent a request (a slowloris) is
// closed before an idle one that did, however recent.
func TestConnsEvictTheUnusedFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(ln, 5, 2, nil, false)
	defer l.Close()
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer Busy(r.Context())()
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	slow, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "GET / HT") // headers that never end
	time.Sleep(50 * time.Millisecond)
	honest := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	get := func() {
		resp, err := honest.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	get() // the second connection, now idle and served
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = slow.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := slow.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection that never sent a request was not closed")
	}
	get() // on its kept-alive connection, which was not closed
	if evicted := l.Stats().Evicted; evicted != 1 {
		t.Fatalf("evicted %d, want 1", evicted)
	}
}
