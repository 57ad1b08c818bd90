package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/diag"
)

func TestBotAddr(t *testing.T) {
	seen := map[string]bool{}
	for a := range 200_000 {
		ip := botAddr(a).To4()
		if ip[0] != 127 || ip[1] < 10 || ip[3] == 0 || ip[3] == 255 {
			t.Fatalf("bot %d: %s, want 127.10.0.1 onwards, last byte 1 to 254", a, ip)
		}
		if seen[ip.String()] {
			t.Fatalf("bot %d: %s taken by another", a, ip)
		}
		seen[ip.String()] = true
	}
	if last := botAddr(botAddrs - 1).String(); last != "127.255.255.254" {
		t.Errorf("last bot: %s", last)
	}
	if botAddr(botAddrs).String() != botAddr(0).String() {
		t.Error("botAddr does not wrap")
	}
}

// Each bot sends at most perSource requests, a group's bots take turns,
// and botsFor counts them.
func TestBots(t *testing.T) {
	const perSource = 20
	b := newBotnet("", perSource)
	for _, n := range []int{1, botsAtOnce - 1, botsAtOnce * perSource, 3*botsAtOnce*perSource + 5} {
		sent := map[int]int{}
		for i := range n {
			sent[b.bot(i)]++
			if i > 0 && b.bot(i) == b.bot(i-1) {
				t.Fatalf("requests %d and %d from the same bot", i-1, i)
			}
		}
		for bot, k := range sent {
			if k > perSource {
				t.Errorf("n=%d: bot %d sent %d, want at most %d", n, bot, k, perSource)
			}
		}
		if len(sent) != botsFor(n, perSource) {
			t.Errorf("n=%d: %d bots sent, botsFor says %d", n, len(sent), botsFor(n, perSource))
		}
	}
}

func TestFloodReq(t *testing.T) {
	serials := []string{"bench-00000", "bench-00001"}
	unknown, token := floodReq("h", floodUnknown, "r1", serials), floodReq("h", floodToken, "r1", serials)
	seen := map[string]bool{}
	for i := range 1000 {
		u := string(unknown(i))
		body := u[strings.Index(u, "\r\n\r\n")+4:]
		if seen[body] || strings.Contains(body, "bench-") {
			t.Fatalf("unknown %d: %s repeats a serial or names a provisioned one", i, body)
		}
		seen[body] = true
		w := string(token(i))
		if !strings.Contains(w, `"serial":"`+serials[i%2]+`"`) || !strings.Contains(w, "Bearer wrong-r1-") || seen[w] {
			t.Fatalf("token %d: %s", i, w)
		}
		seen[w] = true
	}
}

// A bot's requests share its one connection, from its own address: the
// next waits for the last to come back; moving to the next group closes
// the last group's connections.
func TestBotnetPool(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers, closed := make(chan string, 16), make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			peers <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			go func() { _, _ = io.Copy(io.Discard, c); closed <- c.RemoteAddr().(*net.TCPAddr).IP.String() }()
		}
	}()
	const perSource = 2
	b := newBotnet(ln.Addr().String(), perSource)
	c0, err := b.get(0)
	if err != nil {
		t.Fatal(err)
	}
	if ip := <-peers; ip != botAddr(0).String() {
		t.Fatalf("bot 0 came from %s", ip)
	}
	got := make(chan *conn, 1)
	go func() { c, _ := b.get(botsAtOnce); got <- c }() // bot 0's second request
	select {
	case <-got:
		t.Fatal("bot 0's second request did not wait for its connection")
	case <-time.After(50 * time.Millisecond):
	}
	b.put(0, c0, false)
	if again := <-got; again != c0 {
		t.Fatal("bot 0's second request did not reuse its connection")
	}
	b.put(botsAtOnce, c0, false)
	c1, err := b.get(botsAtOnce * perSource) // the next group's first bot
	if err != nil {
		t.Fatal(err)
	}
	if ip := <-peers; ip != botAddr(botsAtOnce).String() {
		t.Fatalf("the next group's first bot came from %s", ip)
	}
	select {
	case ip := <-closed:
		if ip != botAddr(0).String() {
			t.Fatalf("closed %s", ip)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the last group's connection stayed open")
	}
	b.close() // c1 is in flight: closed when it is back
	b.put(botsAtOnce*perSource, c1, false)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection back after close stayed open")
	}
	if b.opened() != 2 {
		t.Fatalf("dials %d, want 2", b.opened())
	}
}

func TestConnectionClose(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		r := bufio.NewReader(server)
		_, _ = r.ReadString('\n')
		_, _ = io.WriteString(server, "HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nRetry-After: 7\r\nContent-Length: 2\r\n\r\n{}")
	}()
	c := &conn{c: client, r: bufio.NewReader(client)}
	a, err := c.do([]byte("POST / HTTP/1.1\r\n\r\n"), time.Second)
	if err != nil || a.status != 429 || !a.closed || a.retryAfter != 7*time.Second {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestReportTally(t *testing.T) {
	var rt reportTally
	rt.add(diag.Report{Minute: 60, Counts: []diag.Count{{Serial: "u-1"}, {Serial: ""}, {Serial: "bench-00001"}},
		Seen: []diag.Seen{{Serial: "u-1"}}, Rejections: []diag.Rejection{{Serial: "u-1"}, {Serial: "u-1"}}}, 100)
	rt.add(diag.Report{Minute: 120, Counts: []diag.Count{{Serial: "u-2"}}}, 50)
	most, minutes := rt.busiest()
	if rt.msgs != 2 || rt.bytes != 150 || minutes != 2 || most != (diagRows{2, 2, 1, 2, 0}) || rt.fleet != (diagRows{1, 1, 0, 0, 0}) {
		t.Fatalf("%+v, busiest %v of %d", rt, most, minutes)
	}
	if s := most.String(); s != "device_stats=2 device_stats_hourly=2 device_seen=1 device_rejections=2 device_keys=0" {
		t.Errorf("%s", s)
	}
}

// The open-loop flags: a flood and a mixed load each need -rates, and a
// mixed load goes with neither -keyed, -flood nor -batch.
func TestOpenLoopFlags(t *testing.T) {
	base := []string{"-admin-token", "x"}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"-rates", "0,1000", "-flood", "unknown"}, true},
		{[]string{"-rates", "1000", "-flood", "token", "-flood-rate", "5000"}, true},
		{[]string{"-rates", "0"}, false},
		{[]string{"-rates", "1000", "-flood", "other"}, false},
		{[]string{"-flood", "unknown"}, false},
		{[]string{"-rates", "1000", "-flood", "unknown", "-flood-per-source", "0"}, false},
		{[]string{"-rates", "1000", "-mixed"}, true},
		{[]string{"-mixed"}, false},
		{[]string{"-rates", "1000", "-mixed", "-keyed"}, false},
		{[]string{"-rates", "1000", "-mixed", "-batch", "10"}, false},
		{[]string{"-rates", "1000", "-mixed", "-flood", "unknown"}, false},
	} {
		_, err := parseFlags(append(base, tc.args...))
		if (err == nil) != tc.ok {
			t.Errorf("%v: %v", tc.args, err)
		}
	}
}
