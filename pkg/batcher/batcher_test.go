package batcher

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// recorder is a flusher that records batches and, when hold is set, keeps
// each batch's slot until the test lets it go.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	at      []time.Time
	handed  chan struct{}
	hold    bool
	held    []func(time.Duration)
	pause   time.Duration
}

func newRecorder(hold bool) *recorder {
	return &recorder{hold: hold, handed: make(chan struct{}, 100)}
}

func (r *recorder) flush(b *Batch[int], release func(time.Duration)) {
	r.mu.Lock()
	r.batches = append(r.batches, append([]int(nil), b.Items...))
	r.at = append(r.at, time.Now())
	if r.hold {
		r.held = append(r.held, release)
	}
	r.mu.Unlock()
	r.handed <- struct{}{}
	if !r.hold {
		release(r.pause)
	}
}

func (r *recorder) releaseAll() {
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, f := range held {
		f(0)
	}
}

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.batches...)
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.handed:
		case <-time.After(5 * time.Second):
			t.Fatalf("batch not handed over within 5s; got %v", r.got())
		}
	}
}

func run[T any](t *testing.T, b *Batcher[T]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5s of its context ending")
		}
	}
}

func add(t *testing.T, b *Batcher[int], items ...int) {
	t.Helper()
	for _, it := range items {
		if err := b.Add(it); err != nil {
			t.Fatalf("Add(%d): %v", it, err)
		}
	}
}

// While the only slot is taken, items join the open batch: the next batch
// is everything that arrived meanwhile, in order.
func TestBatchesGrowWhileSlotsAreTaken(t *testing.T) {
	r := newRecorder(true)
	b := New(Config{MaxItems: 100, Slots: 1}, nil, r.flush)
	stop := run(t, b)
	defer stop()
	add(t, b, 1)
	r.wait(t, 1)
	add(t, b, 2, 3, 4, 5)
	time.Sleep(20 * time.Millisecond)
	if got := r.got(); len(got) != 1 {
		t.Fatalf("a batch was handed over while the slot was taken: %v", got)
	}
	r.releaseAll()
	r.wait(t, 1)
	r.releaseAll()
	if got, want := r.got(), [][]int{{1}, {2, 3, 4, 5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// MaxItems and MaxSize split batches; every item is handed over once, in
// the order added; an item larger than MaxSize goes alone.
func TestBatchesAreBoundedByCountAndSize(t *testing.T) {
	r := newRecorder(true)
	b := New(Config{MaxItems: 3, MaxSize: 10, Slots: 1}, func(v int) int { return v }, r.flush)
	stop := run(t, b)
	defer stop()
	add(t, b, 0)
	r.wait(t, 1)
	add(t, b, 1, 1, 1, 1, 4, 5, 2, 20, 1)
	for range 5 {
		r.releaseAll()
		r.wait(t, 1)
	}
	r.releaseAll()
	want := [][]int{{0}, {1, 1, 1}, {1, 4, 5}, {2}, {20}, {1}}
	if got := r.got(); !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// With a linger, items arriving within it share a batch even though a slot
// is free; without one, an idle batcher hands each item over at once.
func TestLinger(t *testing.T) {
	r := newRecorder(false)
	b := New(Config{MaxItems: 100, Linger: 300 * time.Millisecond}, nil, r.flush)
	stop := run(t, b)
	start := time.Now()
	add(t, b, 1)
	time.Sleep(20 * time.Millisecond)
	add(t, b, 2)
	r.wait(t, 1)
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("batch handed over after %v, before its linger", waited)
	}
	stop()
	if got, want := r.got(), [][]int{{1, 2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}

	// A full batch does not wait for its linger.
	r = newRecorder(false)
	b = New(Config{MaxItems: 2, Linger: time.Hour}, nil, r.flush)
	stop = run(t, b)
	add(t, b, 1, 2)
	r.wait(t, 1)
	stop()

	r = newRecorder(false)
	b = New(Config{MaxItems: 100}, nil, r.flush)
	stop = run(t, b)
	defer stop()
	add(t, b, 1)
	r.wait(t, 1)
	add(t, b, 2)
	r.wait(t, 1)
	if got, want := r.got(), [][]int{{1}, {2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A release's pause spaces the hand-overs; items gather meanwhile.
func TestPause(t *testing.T) {
	r := newRecorder(false)
	r.pause = 200 * time.Millisecond
	b := New(Config{MaxItems: 100}, nil, r.flush)
	stop := run(t, b)
	defer stop()
	add(t, b, 1)
	r.wait(t, 1)
	add(t, b, 2)
	add(t, b, 3)
	r.wait(t, 1)
	got := r.got()
	if want := [][]int{{1}, {2, 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
	if gap := r.at[1].Sub(r.at[0]); gap < 200*time.Millisecond {
		t.Fatalf("second batch %v after the first, within the pause", gap)
	}
}

// Several slots: batches go out while earlier ones are still held, and
// the next waits once all are taken.
func TestSlots(t *testing.T) {
	r := newRecorder(true)
	b := New(Config{MaxItems: 1, Slots: 2}, nil, r.flush)
	stop := run(t, b)
	defer stop()
	add(t, b, 1, 2, 3)
	r.wait(t, 2)
	time.Sleep(20 * time.Millisecond)
	if got := r.got(); len(got) != 2 {
		t.Fatalf("%d batches handed over with 2 slots, want 2", len(got))
	}
	r.releaseAll()
	r.wait(t, 1)
	r.releaseAll()
}

// Add refuses items once Run has stopped; what was added before is handed
// over.
func TestRefusedAfterStop(t *testing.T) {
	r := newRecorder(true)
	b := New(Config{MaxItems: 100}, nil, r.flush)
	stop := run(t, b)
	add(t, b, 1)
	r.wait(t, 1)
	add(t, b, 2, 3)
	go func() {
		time.Sleep(50 * time.Millisecond)
		r.releaseAll()
		r.wait(t, 1)
		r.releaseAll()
	}()
	stop()
	if err := b.Add(5); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Run returned: %v, want ErrClosed", err)
	}
	if got, want := r.got(), [][]int{{1}, {2, 3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// Stopping hands over what is held at once, lingering or not, and Run
// returns only once every batch is released.
func TestStopDrains(t *testing.T) {
	r := newRecorder(true)
	b := New(Config{MaxItems: 2, Linger: time.Hour}, nil, r.flush)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Run(ctx)
	}()
	add(t, b, 1, 2, 3)
	r.wait(t, 1) // {1, 2} is full
	cancel()
	time.Sleep(20 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Run returned while a batch was held")
	default:
	}
	r.releaseAll()
	r.wait(t, 1)
	r.releaseAll()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return once every batch was released")
	}
	if got, want := r.got(), [][]int{{1, 2}, {3}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
