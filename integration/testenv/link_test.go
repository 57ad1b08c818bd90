package testenv

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// A link carries every byte, in order, each way, and once a delay is set
// nothing crosses it sooner: an echo's round trip takes at least twice the
// delay.
func TestLinkDelaysEachWayAndKeepsTheBytes(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	l := NewLink(t, echo.Addr().String())
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func(msg []byte) time.Duration {
		t.Helper()
		start := time.Now()
		go func() { _, _ = c.Write(msg) }()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("the link changed the bytes: %d sent, first difference at %d", len(msg), firstDiff(got, msg))
		}
		return time.Since(start)
	}
	big := make([]byte, 3<<20) // more than one chunk, in order
	for i := range big {
		big[i] = byte(i % 251)
	}
	roundTrip(big)
	if n := l.Delayed(); n != 0 {
		t.Fatalf("%d chunks delayed before a delay was set", n)
	}
	l.SetDelay(100 * time.Millisecond)
	if d := roundTrip([]byte("ping")); d < 200*time.Millisecond {
		t.Fatalf("round trip %s with 100 ms each way", d)
	}
	roundTrip(big)
	if l.Delayed() < 2 {
		t.Fatalf("delayed %d chunks", l.Delayed())
	}
	l.SetDelay(0)
	roundTrip([]byte("pong"))
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
