package idem

import (
	"hash/maphash"
	"slices"
	"time"
)

// filter is a Bloom filter of event ids in time slices: an id is added to
// the slice of its time, and a slice is dropped whole once its end is past
// the window. has answers "certainly not added" or "perhaps". Its size is
// fixed: more ids than it was sized for make "perhaps" likelier (each
// costs a read of event_keys), never wrong.
type filter struct {
	seed   maphash.Seed
	window time.Duration
	span   time.Duration // of one slice: window/filterSlices
	words  int           // uint64s per slice
	slices []slice       // newest last
}

type slice struct {
	start time.Time
	bits  []uint64
}

const (
	// filterSlices: ids stay between window and window*(1+1/filterSlices).
	filterSlices = 4
	// filterHashes is the bits set per id: the best count near 10 bits
	// an id (1% perhaps-wrong), and fine well above that.
	filterHashes = 7
)

// newFilter returns a filter over window in bytes of memory at most.
func newFilter(window time.Duration, bytes int) *filter {
	words := max(bytes/8/(filterSlices+1), 1)
	return &filter{seed: maphash.MakeSeed(), window: window, span: window / filterSlices, words: words}
}

// add notes id at time at; an id older than the window is not kept.
func (f *filter) add(id string, at time.Time, now time.Time) {
	if at.Before(now.Add(-f.window)) {
		return
	}
	s := f.sliceOf(at, now)
	h := maphash.String(f.seed, id)
	m := uint64(len(s.bits)) * 64
	h1, h2 := h, h>>32|1
	for i := range uint64(filterHashes) {
		b := (h1 + i*h2) % m
		s.bits[b/64] |= 1 << (b % 64)
	}
}

// has reports whether id may have been added.
func (f *filter) has(id string) bool {
	h := maphash.String(f.seed, id)
	h1, h2 := h, h>>32|1
	for _, s := range f.slices {
		m := uint64(len(s.bits)) * 64
		all := true
		for i := range uint64(filterHashes) {
			b := (h1 + i*h2) % m
			if s.bits[b/64]&(1<<(b%64)) == 0 {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// sliceOf returns the slice that holds time at (a time ahead of now
// counts as now), made if need be; slices past the window go. Times within
// the window fall in filterSlices+1 slices at most.
func (f *filter) sliceOf(at, now time.Time) *slice {
	f.expire(now)
	if at.After(now) {
		at = now
	}
	start := at.Truncate(f.span)
	i := 0
	for i < len(f.slices) && f.slices[i].start.Before(start) {
		i++
	}
	if i == len(f.slices) || !f.slices[i].start.Equal(start) {
		f.slices = slices.Insert(f.slices, i, slice{start: start, bits: make([]uint64, f.words)})
	}
	return &f.slices[i]
}

// expire drops the slices whose end is past the window.
func (f *filter) expire(now time.Time) {
	n := 0
	for n < len(f.slices) && f.slices[n].start.Add(f.span).Before(now.Add(-f.window)) {
		n++
	}
	f.slices = f.slices[n:]
}
