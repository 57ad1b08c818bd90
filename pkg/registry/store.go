package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/kvmap"
)

// ErrNotFound is returned by Get and Delete for a serial with no record.
var ErrNotFound = errors.New("device not found")

// Store reads and writes device records in the KV bucket and keeps a Cache
// current. Writes through the Store reach its own Cache before they return,
// so the instance that made a change serves it at once; every other instance
// sees it through its watch.
type Store struct {
	kv    jetstream.KeyValue
	cache *Cache
	log   *zap.Logger
}

// BucketConfig describes the KV bucket holding the registry.
type BucketConfig struct {
	Bucket   string
	Replicas int
	// ReadOnly opens the bucket without creating it: a program that only
	// reads the registry waits for ingest-api to create it (its NATS user
	// may not write the bucket).
	ReadOnly bool
}

// Open creates the bucket if it is missing (ReadOnly: waits until it
// exists) and returns a Store over it. Run must be called to fill and
// follow the cache.
func Open(ctx context.Context, js jetstream.JetStream, cfg BucketConfig, cache *Cache, log *zap.Logger) (*Store, error) {
	var kv jetstream.KeyValue
	logged := false
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		if cfg.ReadOnly {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				if !logged {
					log.Info("waiting for ingest-api to create the registry bucket", zap.String("bucket", cfg.Bucket))
					logged = true
				}
				return failure.AsThrottled(err, 500*time.Millisecond)
			}
			return err
		}
		kv, err = bus.EnsureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket:       cfg.Bucket,
			Description:  "device registry: serial -> token, connection type, inputs, entity mapping",
			History:      1,
			MaxValueSize: 1 << 20,
			Storage:      jetstream.FileStorage,
			Replicas:     cfg.Replicas,
		}, log)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open registry bucket %q: %w", cfg.Bucket, err)
	}
	return &Store{kv: kv, cache: cache, log: log}, nil
}

// Cache returns the cache this store keeps current.
func (s *Store) Cache() *Cache { return s.cache }

// ErrUnchanged, returned by an Update's change, leaves the record as it is.
var ErrUnchanged = errors.New("unchanged")

// maxConflicts bounds an Update's retries when other writers keep changing
// the same record.
const maxConflicts = 16

// Update reads the record of serial (exists: there is one), lets change
// alter it, and stores the result if nobody changed the record meanwhile,
// else reads it again: two ingest-api copies changing one device's tokens
// at once both take effect. The result reaches this process's cache before
// Update returns. A change that returns ErrUnchanged stores nothing.
func (s *Store) Update(ctx context.Context, serial string, change func(d *Device, exists bool) error) (Device, error) {
	for range maxConflicts {
		d, rev, err := s.read(ctx, serial)
		if err != nil {
			return Device{}, err
		}
		if err := change(&d, rev != 0); err != nil {
			if errors.Is(err, ErrUnchanged) {
				return d, nil
			}
			return Device{}, err
		}
		if d.AccessToken != "" || d.Serial != serial {
			return Device{}, errors.New("store device: a token in the clear, or another serial")
		}
		b, err := json.Marshal(d)
		if err != nil {
			return Device{}, fmt.Errorf("encode device: %w", err)
		}
		if rev == 0 {
			rev, err = s.kv.Create(ctx, kvmap.Key(serial), b)
		} else {
			rev, err = s.kv.Update(ctx, kvmap.Key(serial), b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return Device{}, fmt.Errorf("store device: %w", err)
		}
		s.cache.Put(d, rev)
		return d, nil
	}
	return Device{}, fmt.Errorf("store device: changed by others %d times in a row", maxConflicts)
}

// Upgrade rewrites, in the form k makes, every record that is not (tokens
// in the clear from before they were kept as digests, or made under
// another TOKEN_KEY than the one k writes under). ingest-api runs it once
// its copies agree on that key (KeepUpgraded); an upgrade that races a
// workspace change simply reads the record again, and one that sees k
// change keys stops. A record it cannot upgrade (sealed under a key it
// does not hold) is left as it is and counted in failed; err is the first
// such failure.
func (s *Store) Upgrade(ctx context.Context, k *Keyring) (upgraded, failed int, first error) {
	now := time.Now()
	target := k.ID()
	for _, serial := range s.cache.Stale(target) {
		if k.ID() != target {
			break
		}
		changed := false
		_, err := s.Update(ctx, serial, func(d *Device, exists bool) error {
			if !exists {
				return ErrUnchanged
			}
			ok, err := d.Upgrade(k, now)
			if err == nil && !ok {
				err = ErrUnchanged
			}
			changed = ok
			return err
		})
		switch {
		case err != nil && ctx.Err() != nil:
			return upgraded, failed, ctx.Err()
		case err != nil:
			if failed++; first == nil {
				first = fmt.Errorf("upgrade device %q: %w", serial, err)
			}
		case changed:
			upgraded++
		}
	}
	return upgraded, failed, first
}

// upgradeEvery is how often KeepUpgraded looks again for records not in
// the current form (written by an older copy during a rolling upgrade)
// when the copies' agreement has not changed.
const upgradeEvery = time.Minute

// KeepUpgraded is ingest-api's part that runs Upgrade whenever the live
// copies come to agree on the key to write under (c), and every minute
// while they do; while they do not, records stay as they are, and every
// copy reads them.
func (s *Store) KeepUpgraded(k *Keyring, c *Census) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(upgradeEvery)
		defer t.Stop()
		for {
			if c.Agreed() {
				n, failed, err := s.Upgrade(ctx, k)
				if n > 0 {
					s.log.Info("registry records upgraded to the current token key", zap.Int("devices", n), zap.String("key", k.ID()))
				}
				if failed > 0 {
					s.log.Error("registry records left as they are", zap.Int("devices", failed), zap.Error(err))
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			case <-c.Changed():
			}
		}
	}
}

// Get reads the record of serial from the bucket.
func (s *Store) Get(ctx context.Context, serial string) (Device, error) {
	d, rev, err := s.read(ctx, serial)
	if err == nil && rev == 0 {
		return Device{}, ErrNotFound
	}
	return d, err
}

// read reads the record of serial and its revision: 0, and a record with
// only the serial, when there is none.
func (s *Store) read(ctx context.Context, serial string) (d Device, rev uint64, err error) {
	e, err := s.kv.Get(ctx, kvmap.Key(serial))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Device{Serial: serial}, 0, nil
	case err != nil:
		return Device{}, 0, fmt.Errorf("read device: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return Device{}, 0, fmt.Errorf("decode device: %w", err)
	}
	return d, e.Revision(), nil
}

// Delete removes the record of serial and returns what it was.
func (s *Store) Delete(ctx context.Context, serial string) (Device, error) {
	e, err := s.kv.Get(ctx, kvmap.Key(serial))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Device{}, ErrNotFound
	}
	if err != nil {
		return Device{}, fmt.Errorf("read device: %w", err)
	}
	var d Device
	_ = json.Unmarshal(e.Value(), &d)
	if err := s.kv.Delete(ctx, kvmap.Key(serial)); err != nil {
		return Device{}, fmt.Errorf("delete device: %w", err)
	}
	s.cache.Remove(serial, e.Revision())
	return d, nil
}

// Run follows the bucket until ctx ends: first its whole contents (then the
// cache reports synced), then every change.
func (s *Store) Run(ctx context.Context) error {
	return s.cache.Follow(ctx, s.kv, kvmap.Reader[*Entry]{
		Decode: func(serial string, value []byte, rev uint64) (*Entry, bool) {
			var d Device
			if err := json.Unmarshal(value, &d); err != nil || d.Serial != serial {
				s.log.Warn("registry record unreadable", zap.String("serial", serial), zap.Error(err))
				return nil, false
			}
			return NewEntry(d, rev), true
		},
		BadKey: func(key string) { s.log.Warn("registry key is not a serial", zap.String("key", key)) },
		Synced: func() { s.log.Info("registry synced", zap.Int("devices", s.cache.Len())) },
	})
}
