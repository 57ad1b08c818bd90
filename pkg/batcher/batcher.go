// Package batcher is the service's one batching mechanism. Items added by
// any number of goroutines fill a batch; one goroutine hands batches over, in
// the order they filled, to a flush function. A batch goes once a slot is
// free and it is full, or its linger has passed; while every slot is taken,
// items keep joining the open batch. So batches grow with load without
// delaying an idle system: ingest-api's publisher (a slot per message
// awaiting its stream ack), both workers' consumers (one slot, the next batch
// gathering while the last is handled, the writer pacing its inserts) and the
// writer's raw message log (a long linger) all batch this way.
package batcher

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by Add once Run has begun to stop.
var ErrClosed = errors.New("batcher stopped")

// Config bounds the batches.
type Config struct {
	// MaxItems is the most items one batch holds (at least 1).
	MaxItems int
	// MaxSize bounds the sum of the items' sizes in a batch (0: no
	// bound). An item larger than MaxSize goes in a batch of its own.
	MaxSize int
	// Linger is how long a batch that is not full waits, from its first
	// item, for more (0: it goes as soon as a slot is free).
	Linger time.Duration
	// Slots is how many batches may be handed over and not yet released
	// (at least 1).
	Slots int
}

// Batch is one batch of items.
type Batch[T any] struct {
	Items []T
	size  int
	first time.Time
}

// Flush handles one batch. It is called from Run's goroutine, one batch at
// a time. The batch holds a slot until release is called, once, from any
// goroutine: a flusher done with the batch when it returns calls it before
// returning. The next batch is handed over no sooner than pause after this
// one was.
type Flush[T any] func(b *Batch[T], release func(pause time.Duration))

// Batcher gathers items into batches and hands them to its flush function.
type Batcher[T any] struct {
	cfg   Config
	size  func(T) int
	flush Flush[T]

	mu     sync.Mutex
	open   *Batch[T]
	sealed []*Batch[T]
	closed bool
	next   time.Time // no batch is handed over before this

	wake  chan struct{}
	slots chan struct{}
}

// New returns a batcher; Run hands its batches to flush. size weighs an item
// against MaxSize (nil: every item weighs nothing).
func New[T any](cfg Config, size func(T) int, flush Flush[T]) *Batcher[T] {
	cfg.MaxItems = max(cfg.MaxItems, 1)
	cfg.Slots = max(cfg.Slots, 1)
	if size == nil {
		size = func(T) int { return 0 }
	}
	return &Batcher[T]{cfg: cfg, size: size, flush: flush,
		wake: make(chan struct{}, 1), slots: make(chan struct{}, cfg.Slots)}
}

// Add puts item into the open batch if it fits beside what that holds,
// else into a new one, which holds it alone even when it exceeds MaxSize.
func (b *Batcher[T]) Add(item T) error {
	sz := b.size(item)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	o := b.open
	if o != nil && (len(o.Items)+1 > b.cfg.MaxItems || (b.cfg.MaxSize > 0 && o.size+sz > b.cfg.MaxSize)) {
		b.sealed = append(b.sealed, o)
		o = nil
	}
	if o == nil {
		o = &Batch[T]{first: time.Now()}
		b.open = o
	}
	o.Items = append(o.Items, item)
	o.size += sz
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

// Run hands batches over until ctx ends. Then Add refuses new items, the
// batches held are handed over at once (no linger, no pause), and Run
// returns once every batch has been released.
func (b *Batcher[T]) Run(ctx context.Context) error {
	for {
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done():
			b.finish()
			return nil
		}
		var batch *Batch[T]
		if b.pause(ctx) {
			batch = b.take(ctx)
		}
		if batch == nil {
			<-b.slots
			b.finish()
			return nil
		}
		b.hand(batch)
	}
}

// pause waits until the next batch may go; false if ctx ended first.
func (b *Batcher[T]) pause(ctx context.Context) bool {
	b.mu.Lock()
	wait := time.Until(b.next)
	b.mu.Unlock()
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// take waits for a batch that may go: sealed, full, past its linger, or
// any once stopping. It returns nil if ctx ends first.
func (b *Batcher[T]) take(ctx context.Context) *Batch[T] {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		batch, wait := b.ready(false)
		if batch != nil {
			return batch
		}
		var due <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			due = timer.C
		}
		select {
		case <-b.wake:
		case <-due:
		case <-ctx.Done():
			return nil
		}
	}
}

// ready takes the oldest batch that may go (any, when all is set), or says
// how long until the open one may (0: there is none).
func (b *Batcher[T]) ready(all bool) (*Batch[T], time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch *Batch[T]
	switch {
	case len(b.sealed) > 0:
		batch = b.sealed[0]
		b.sealed[0] = nil
		b.sealed = b.sealed[1:]
	case b.open == nil:
		return nil, 0
	default:
		if wait := time.Until(b.open.first.Add(b.cfg.Linger)); !all && wait > 0 && len(b.open.Items) < b.cfg.MaxItems {
			return nil, wait
		}
		batch, b.open = b.open, nil
	}
	return batch, 0
}

// hand gives batch to the flusher; its slot is taken.
func (b *Batcher[T]) hand(batch *Batch[T]) {
	start := time.Now()
	var once sync.Once
	b.flush(batch, func(pause time.Duration) {
		once.Do(func() {
			if pause > 0 {
				b.mu.Lock()
				if at := start.Add(pause); at.After(b.next) {
					b.next = at
				}
				b.mu.Unlock()
			}
			<-b.slots
		})
	})
}

// finish refuses new items, hands over what is held, each batch waiting
// for a slot, and waits until every slot is released.
func (b *Batcher[T]) finish() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	for {
		b.slots <- struct{}{}
		batch, _ := b.ready(true)
		if batch == nil {
			<-b.slots
			break
		}
		b.hand(batch)
	}
	for range b.cfg.Slots {
		b.slots <- struct{}{}
	}
}
