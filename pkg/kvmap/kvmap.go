// Package kvmap keeps a process's in-memory copy of a JetStream KV bucket
// whose keys are names in base64 (the device registry, the admin keys):
// each record decoded once per change, not once per request.
package kvmap

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Key maps any name onto the KV key alphabet.
func Key(name string) string { return keys.EncodeToString([]byte(name)) }

// Name is the name whose key is key; false: key is no name's. Decoding is
// strict, so that one name has one key: loose base64 reads "QR" as "A", as
// it does "QQ", and a record under "QR" would stand for, or delete, A's.
func Name(key string) (string, bool) {
	raw, err := keys.DecodeString(key)
	return string(raw), err == nil
}

var keys = base64.RawURLEncoding.Strict()

type slot[V any] struct {
	rev  uint64
	v    V
	live bool // false: deleted at rev
}

// Map is the copy: name -> V. Updates come from the watch (Follow) and from
// this process's own writes; a per-name revision keeps a late watch
// delivery from undoing a newer local write.
type Map[V any] struct {
	mu      sync.RWMutex
	items   map[string]slot[V]
	live    int
	changed time.Time // when a change last took effect
	synced  chan struct{}
	once    sync.Once
}

// New returns an empty map that is not yet synced.
func New[V any]() *Map[V] {
	return &Map[V]{items: make(map[string]slot[V]), synced: make(chan struct{})}
}

// Lookup returns the value of name, if the map holds it.
func (m *Map[V]) Lookup(name string) (V, bool) {
	m.mu.RLock()
	s := m.items[name]
	m.mu.RUnlock()
	return s.v, s.live
}

// Put sets name to v at revision rev, unless the map holds rev or later.
func (m *Map[V]) Put(name string, v V, rev uint64) {
	m.set(name, slot[V]{rev: rev, v: v, live: true})
}

// Remove deletes name as of revision rev, unless the map holds a later one.
func (m *Map[V]) Remove(name string, rev uint64) {
	m.set(name, slot[V]{rev: rev})
}

func (m *Map[V]) set(name string, s slot[V]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.items[name]
	if ok && (old.rev > s.rev || old.rev == s.rev && s.live) {
		return
	}
	if old.live {
		m.live--
	}
	if s.live {
		m.live++
	}
	m.items[name] = s
	m.changed = time.Now()
}

// Range calls f for each name held, in no order, until f returns false. It
// holds the map's read lock: f must not change the map.
func (m *Map[V]) Range(f func(name string, v V) bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, s := range m.items {
		if s.live && !f(name, s.v) {
			return
		}
	}
}

// LastChange is when a record last changed in this copy (zero: never).
func (m *Map[V]) LastChange() time.Time {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}

// Len is the number of names held.
func (m *Map[V]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.live
}

// Synced is closed once the initial contents of the bucket have been loaded.
func (m *Map[V]) Synced() <-chan struct{} { return m.synced }

// IsSynced reports whether Synced is closed.
func (m *Map[V]) IsSynced() bool {
	select {
	case <-m.synced:
		return true
	default:
		return false
	}
}

// Reader is how Follow reads a bucket's records.
type Reader[V any] struct {
	// Decode returns the value of the record stored at revision rev; false:
	// unreadable.
	Decode func(name string, value []byte, rev uint64) (V, bool)
	// DropUnreadable removes a name whose record is unreadable; else the
	// copy keeps what it had.
	DropUnreadable bool
	// BadKey, if set, is told of a key that is not a name in base64.
	BadKey func(key string)
	// Synced, if set, is called once the bucket's contents are loaded.
	Synced func()
}

// Follow keeps the map current with kv until ctx ends: first the bucket's
// whole contents (then Synced is closed), then every change as it happens.
func (m *Map[V]) Follow(ctx context.Context, kv jetstream.KeyValue, r Reader[V]) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			m.apply(e, r)
		}
	}
}

func (m *Map[V]) apply(e jetstream.KeyValueEntry, r Reader[V]) {
	if e == nil { // the end of the bucket's contents
		m.once.Do(func() { close(m.synced) })
		if r.Synced != nil {
			r.Synced()
		}
		return
	}
	name, ok := Name(e.Key())
	if !ok {
		if r.BadKey != nil {
			r.BadKey(e.Key())
		}
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		v, ok := r.Decode(name, e.Value(), e.Revision())
		if ok {
			m.Put(name, v, e.Revision())
		}
		if ok || !r.DropUnreadable {
			return
		}
	}
	m.Remove(name, e.Revision())
}
