package ratelimit

import "testing"

func TestPerDeviceBuckets(t *testing.T) {
	l := New(1, 3)
	for i := range 3 {
		if !l.Allow("a") {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	if l.Allow("a") {
		t.Fatal("request beyond the burst allowed")
	}
	if !l.Allow("b") {
		t.Fatal("one device's traffic limited another")
	}
	l.Forget("a")
	if !l.Allow("a") {
		t.Fatal("a forgotten device starts with a full bucket")
	}
	off := New(0, 0)
	for range 1000 {
		if !off.Allow("a") {
			t.Fatal("a zero rate must turn limiting off")
		}
	}
}
