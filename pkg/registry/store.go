package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
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

// Open creates the bucket if it is missing and returns a Store over it.
// Run must be called to fill and follow the cache.
func Open(ctx context.Context, js jetstream.JetStream, cfg BucketConfig, cache *Cache, log *zap.Logger) (*Store, error) {
	var kv jetstream.KeyValue
	if cfg.ReadOnly {
		return openReadOnly(ctx, js, cfg, cache, log)
	}
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:       cfg.Bucket,
			Description:  "device registry: serial -> token, connection type, inputs, entity mapping",
			History:      1,
			MaxValueSize: 1 << 20,
			Storage:      jetstream.FileStorage,
			Replicas:     cfg.Replicas,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open registry bucket %q: %w", cfg.Bucket, err)
	}
	return &Store{kv: kv, cache: cache, log: log}, nil
}

// openReadOnly looks the bucket up until it exists.
func openReadOnly(ctx context.Context, js jetstream.JetStream, cfg BucketConfig, cache *Cache, log *zap.Logger) (*Store, error) {
	for logged := false; ; {
		var kv jetstream.KeyValue
		err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
			return err
		})
		if err == nil {
			return &Store{kv: kv, cache: cache, log: log}, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("open registry bucket %q: %w", cfg.Bucket, err)
		}
		if !logged {
			log.Info("waiting for ingest-api to create the registry bucket", zap.String("bucket", cfg.Bucket))
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("open registry bucket %q: %w", cfg.Bucket, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Cache returns the cache this store keeps current.
func (s *Store) Cache() *Cache { return s.cache }

// key maps any serial onto the KV key alphabet.
func key(serial string) string { return base64.RawURLEncoding.EncodeToString([]byte(serial)) }

// Put stores d (already normalized) and applies it to the local cache.
func (s *Store) Put(ctx context.Context, d Device) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode device: %w", err)
	}
	rev, err := s.kv.Put(ctx, key(d.Serial), b)
	if err != nil {
		return fmt.Errorf("store device: %w", err)
	}
	s.cache.Put(d, rev)
	return nil
}

// Get reads the record of serial from the bucket.
func (s *Store) Get(ctx context.Context, serial string) (Device, error) {
	e, err := s.kv.Get(ctx, key(serial))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Device{}, ErrNotFound
	}
	if err != nil {
		return Device{}, fmt.Errorf("read device: %w", err)
	}
	var d Device
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return Device{}, fmt.Errorf("decode device: %w", err)
	}
	return d, nil
}

// Delete removes the record of serial.
func (s *Store) Delete(ctx context.Context, serial string) error {
	e, err := s.kv.Get(ctx, key(serial))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("read device: %w", err)
	}
	if err := s.kv.Delete(ctx, key(serial)); err != nil {
		return fmt.Errorf("delete device: %w", err)
	}
	s.cache.Remove(serial, e.Revision())
	return nil
}

// Run follows the bucket until ctx ends: first its whole contents (then the
// cache reports synced), then every change.
func (s *Store) Run(ctx context.Context) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch registry: %w", err)
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
			if e == nil {
				s.cache.markSynced()
				s.log.Info("registry synced", zap.Int("devices", s.cache.Len()))
				continue
			}
			s.apply(e)
		}
	}
}

func (s *Store) apply(e jetstream.KeyValueEntry) {
	raw, err := base64.RawURLEncoding.DecodeString(e.Key())
	if err != nil {
		s.log.Warn("registry key is not a serial", zap.String("key", e.Key()))
		return
	}
	serial := string(raw)
	if e.Operation() != jetstream.KeyValuePut {
		s.cache.Remove(serial, e.Revision())
		return
	}
	var d Device
	if err := json.Unmarshal(e.Value(), &d); err != nil || d.Serial != serial {
		s.log.Warn("registry record unreadable", zap.String("serial", serial), zap.Error(err))
		return
	}
	s.cache.Put(d, e.Revision())
}
