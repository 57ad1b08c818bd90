package ratelimit

import (
	"testing"
	"time"
)

func (l *Limiter) ok(serial string, n int) bool {
	ok, _ := l.AllowN(serial, n)
	return ok
}

func TestPerDeviceBuckets(t *testing.T) {
	l := New(1, 3)
	for i := range 3 {
		if !l.ok("a", 1) {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	if l.ok("a", 1) {
		t.Fatal("request beyond the burst allowed")
	}
	if !l.ok("b", 1) {
		t.Fatal("one device's traffic limited another")
	}
	if !l.ok("c", 3) || l.ok("c", 1) {
		t.Fatal("a backlog of n readings takes n tokens")
	}
	if ok, wait := l.AllowN("c", 2); ok || wait < 1500*time.Millisecond || wait > 2*time.Second {
		t.Fatalf("two readings on an empty bucket at 1/s: ok %v, wait %v; want a wait of about 2s", ok, wait)
	}
	if !l.ok("d", 50) || l.ok("d", 1) {
		t.Fatal("a backlog larger than the burst takes the whole burst")
	}
	l.Forget("a")
	if !l.ok("a", 1) {
		t.Fatal("a forgotten device starts with a full bucket")
	}
	off := New(0, 0)
	for range 1000 {
		if !off.ok("a", 1) {
			t.Fatal("a zero rate must turn limiting off")
		}
	}
}
