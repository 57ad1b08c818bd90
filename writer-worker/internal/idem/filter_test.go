package idem

import (
	"fmt"
	"testing"
	"time"
)

// What was added is always found; what was not is found rarely at the size
// the filter was made for; slices past the window go, with their ids.
func TestFilter(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	f := newFilter(24*time.Hour, 5*64<<10) // 64 KiB a slice: ~50,000 ids at 10 bits each
	const n = 20_000
	for i := range n {
		f.add(fmt.Sprintf("id-%d", i), now.Add(-time.Duration(i)*time.Second), now)
	}
	for i := range n {
		if !f.has(fmt.Sprintf("id-%d", i)) {
			t.Fatalf("id-%d added but not found", i)
		}
	}
	wrong := 0
	for i := range n {
		if f.has(fmt.Sprintf("other-%d", i)) {
			wrong++
		}
	}
	// 20,000 ids over 6 h slices: 5.6 h in one slice (~17 bits an id),
	// the rest in the next; a false hit is ~1 in 1,000.
	if wrong > n/200 {
		t.Fatalf("%d of %d ids never added were found, want under 0.5%%", wrong, n)
	}
	if len(f.slices) != 2 {
		t.Fatalf("%d slices, want 2", len(f.slices))
	}
	// Older than the window: not kept. Ahead of now: kept as now.
	f.add("ancient", now.Add(-25*time.Hour), now)
	f.add("ahead", now.Add(time.Hour), now)
	if f.has("ancient") || !f.has("ahead") || len(f.slices) != 2 {
		t.Fatalf("ancient %v ahead %v slices %d", f.has("ancient"), f.has("ahead"), len(f.slices))
	}
	// A day and a slice later, the old slices are gone.
	later := now.Add(24*time.Hour + 6*time.Hour + time.Minute)
	f.add("new", later, later)
	if f.has("id-0") || f.has("id-19999") || !f.has("new") || len(f.slices) != 1 {
		t.Fatalf("after the window: id-0 %v id-19999 %v new %v slices %d", f.has("id-0"), f.has("id-19999"), f.has("new"), len(f.slices))
	}
	// Memory stays within the bound: at most filterSlices+1 slices.
	for h := range 48 {
		at := later.Add(time.Duration(h) * time.Hour)
		f.add("x", at.Add(-20*time.Hour), at)
		f.add("y", at, at)
		if len(f.slices) > filterSlices+1 {
			t.Fatalf("%d slices live", len(f.slices))
		}
	}
}
