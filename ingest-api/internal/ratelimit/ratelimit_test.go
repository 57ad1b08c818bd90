package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
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
	// A refusal takes nothing: asked again at once, the wait is the same,
	// not twice it.
	if ok, wait := l.AllowN("c", 2); ok || wait > 2*time.Second {
		t.Fatalf("asked again after a refusal: ok %v, wait %v; want a wait of about 2s", ok, wait)
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

// Two copies share what they grant over a real NATS server: a device that
// spent its burst on one copy is refused by the other within ShareEvery.
func TestSharedAcrossCopies(t *testing.T) {
	nc, _ := testenv.Connect(t)
	a, b := New(0.5, 5), New(0.5, 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	for i, l := range []*Limiter{a, b} {
		run := l.Sharing(nc, "test.ratelimit", fmt.Sprint("copy-", i), zap.NewNop())
		go func() { _ = run(ctx); done <- struct{}{} }()
	}
	time.Sleep(100 * time.Millisecond) // both subscribed
	for i := range 5 {
		if !a.ok("dev", 1) {
			t.Fatalf("reading %d within the burst refused", i+1)
		}
	}
	if !b.ok("other", 5) {
		t.Fatal("another device is limited")
	}
	deadline := time.Now().Add(3 * ShareEvery)
	for b.peek("dev") >= 1 {
		if time.Now().After(deadline) {
			t.Fatal("the other copy did not learn what the first granted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.ok("dev", 1) {
		t.Fatal("the other copy granted a reading beyond the device's burst")
	}
	if a.peek("other") >= 1 {
		t.Fatal("sharing is not both ways")
	}
	cancel()
	<-done
	<-done
}

// peek is the tokens serial's bucket holds now.
func (l *Limiter) peek(serial string) float64 {
	return l.bucket(serial).Tokens()
}

// The table holds the devices whose buckets are not full, not every
// device that ever posted to this copy (those deleted on another copy, or
// long silent, included): a full bucket is dropped, and a new one is the
// same.
func TestFullBucketsAreDropped(t *testing.T) {
	l := New(1e6, 1) // a bucket is full again a microsecond after a reading
	const devices = 20_000
	for i := range devices {
		if !l.ok(fmt.Sprintf("dev-%d", i), 1) {
			t.Fatalf("device %d refused", i)
		}
	}
	l.mu.Lock()
	n := len(l.buckets)
	l.mu.Unlock()
	if n > 2*minSweep {
		t.Fatalf("%d buckets held after %d devices posted once each, want at most %d", n, devices, 2*minSweep)
	}
	slow := New(0.001, 2) // a drained bucket stays: its device is still held to its rate
	slow.ok("busy", 2)
	for i := range devices {
		slow.ok(fmt.Sprintf("dev-%d", i), 1)
	}
	if slow.ok("busy", 1) {
		t.Fatal("a drained bucket was dropped: its device posted again at once")
	}
}
