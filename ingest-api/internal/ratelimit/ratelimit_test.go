package ratelimit

import "testing"

func TestPerDeviceBuckets(t *testing.T) {
	l := New(1, 3)
	for i := range 3 {
		if !l.AllowN("a", 1) {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	if l.AllowN("a", 1) {
		t.Fatal("request beyond the burst allowed")
	}
	if !l.AllowN("b", 1) {
		t.Fatal("one device's traffic limited another")
	}
	if !l.AllowN("c", 3) || l.AllowN("c", 1) {
		t.Fatal("a backlog of n readings takes n tokens")
	}
	l.Forget("a")
	if !l.AllowN("a", 1) {
		t.Fatal("a forgotten device starts with a full bucket")
	}
	off := New(0, 0)
	for range 1000 {
		if !off.AllowN("a", 1) {
			t.Fatal("a zero rate must turn limiting off")
		}
	}
}
