package guard

import "sync/atomic"

// Budget bounds the bytes that request bodies hold at once, with their
// copies and decompression state. A request takes what it needs as its
// body grows and gives it all back when it is answered; one that cannot
// take more is answered 503 at once instead of growing the process.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget allows max bytes in all.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Take reserves n bytes if they fit.
func (b *Budget) Take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Give returns n bytes taken before.
func (b *Budget) Give(n int64) { b.used.Add(-n) }

// Used is the bytes held now.
func (b *Budget) Used() int64 { return b.used.Load() }
