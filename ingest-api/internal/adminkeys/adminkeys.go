// Package adminkeys holds the workspace API's named keys: each has a name,
// a role and an optional expiry, and is kept as a digest (shown once, at
// creation). ADMIN_TOKEN is the bootstrap key, role admin, kept nowhere.
// The keys live in a JetStream KV bucket that only ingest-api may use,
// followed into memory by every copy.
package adminkeys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/kvmap"
)

// Role is what a key may do; each role may do what the ones below it may.
type Role string

// The roles, least first.
const (
	// Viewer reads: devices (without tokens), entities, messages, series.
	Viewer Role = "viewer"
	// Operator also changes devices, their mappings and tokens (and
	// reveals them), and manages dead letters.
	Operator Role = "operator"
	// Admin also manages keys and reads the audit trail.
	Admin Role = "admin"
)

var ranks = map[Role]int{Viewer: 1, Operator: 2, Admin: 3}

// Allows reports whether r may do what need may.
func (r Role) Allows(need Role) bool { return ranks[r] >= ranks[need] && ranks[need] > 0 }

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return ranks[r] > 0 }

// Key is one stored key. Digest is the SHA-256 of the secret: a secret of
// 256 random bits needs no keyed digest to resist guessing, and a digest
// independent of TOKEN_KEY survives that key's rotation.
type Key struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      Role       `json:"role"`
	Expires   *time.Time `json:"expires,omitempty"`
	Created   time.Time  `json:"created"`
	CreatedBy string     `json:"createdBy"`
	Digest    []byte     `json:"digest,omitempty"`
}

// Public is k without its digest: what the workspace API lists.
func (k Key) Public() Key {
	k.Digest = nil
	return k
}

// Identity is who made a workspace request: a key's name and role.
type Identity struct {
	Name    string     `json:"name"`
	Role    Role       `json:"role"`
	Expires *time.Time `json:"expires,omitempty"`
}

// BootstrapName names the ADMIN_TOKEN key in the audit trail.
const BootstrapName = "bootstrap"

// Errors of Create and Revoke.
var (
	ErrInvalid  = errors.New("invalid key")
	ErrConflict = errors.New("a key with this name exists")
	ErrNotFound = errors.New("no such key")
)

// MaxKeys bounds the keys a workspace holds (each is a few hundred bytes in
// every ingest-api copy).
const MaxKeys = 1000

// secretPrefix starts every key's secret: dk_<id>_<43 characters>. The id
// finds the key without trying every digest; the rest is 256 random bits.
const secretPrefix = "dk_"

// Store is the keys, in the bucket and in memory.
type Store struct {
	kv        jetstream.KeyValue
	log       *zap.Logger
	bootstrap [sha256.Size]byte
	keys      *kvmap.Map[Key] // by name
}

// Open creates the bucket if it is missing; Run fills and follows the
// memory copy. bootstrap is ADMIN_TOKEN.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, bootstrap string, log *zap.Logger) (*Store, error) {
	var kv jetstream.KeyValue
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		kv, err = bus.EnsureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "workspace API keys: name -> role, expiry, SHA-256 of the secret",
			History:     1, MaxValueSize: 4 << 10, Storage: jetstream.FileStorage, Replicas: replicas,
		}, log)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open admin keys bucket: %w", err)
	}
	s := Bootstrap(bootstrap)
	s.kv, s.log = kv, log
	return s, nil
}

// Bootstrap returns a store that knows only the bootstrap key (no bucket:
// Create and Revoke fail, Run must not be called). Open's stores start so.
func Bootstrap(bootstrap string) *Store {
	return &Store{log: zap.NewNop(), bootstrap: sha256.Sum256([]byte(bootstrap)), keys: kvmap.New[Key]()}
}

// Synced is closed once the bucket's contents are in memory.
func (s *Store) Synced() <-chan struct{} { return s.keys.Synced() }

// Run follows the bucket until ctx ends. An unreadable record revokes the
// key it held.
func (s *Store) Run(ctx context.Context) error {
	return s.keys.Follow(ctx, s.kv, kvmap.Reader[Key]{DropUnreadable: true,
		Decode: func(name string, value []byte, _ uint64) (k Key, ok bool) {
			if err := json.Unmarshal(value, &k); err != nil || k.Name != name || !k.Role.Valid() {
				s.log.Warn("admin key record unreadable", zap.String("key", name))
				return Key{}, false
			}
			return k, true
		}})
}

// Authenticate returns who secret is: the bootstrap key, or a stored key
// that has not expired.
func (s *Store) Authenticate(secret string, now time.Time) (Identity, bool) {
	if secret == "" {
		return Identity{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], s.bootstrap[:]) == 1 {
		return Identity{Name: BootstrapName, Role: Admin}, true
	}
	id, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return Identity{}, false
	}
	id, _, _ = strings.Cut(id, "_")
	var k Key
	found := false
	s.keys.Range(func(_ string, c Key) bool { // at most MaxKeys, on the workspace API only
		k, found = c, c.ID == id
		return !found
	})
	if !found || subtle.ConstantTimeCompare(sum[:], k.Digest) != 1 || (k.Expires != nil && !now.Before(*k.Expires)) {
		return Identity{}, false
	}
	return Identity{Name: k.Name, Role: k.Role, Expires: k.Expires}, true
}

// List returns the keys by name, without digests.
func (s *Store) List() []Key {
	out := make([]Key, 0, s.keys.Len())
	s.keys.Range(func(_ string, k Key) bool {
		out = append(out, k.Public())
		return true
	})
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Create stores a new key and returns it with its secret, which is kept
// nowhere: this is the only time it is shown.
func (s *Store) Create(ctx context.Context, name string, role Role, expires *time.Time, by string, now time.Time) (Key, string, error) {
	if err := checkName(name); err != nil {
		return Key{}, "", err
	}
	if s.kv == nil {
		return Key{}, "", errors.New("no key store")
	}
	switch {
	case !role.Valid():
		return Key{}, "", fmt.Errorf("%w: role must be viewer, operator or admin", ErrInvalid)
	case expires != nil && !expires.After(now):
		return Key{}, "", fmt.Errorf("%w: expires must be in the future", ErrInvalid)
	}
	if s.keys.Len() >= MaxKeys {
		return Key{}, "", fmt.Errorf("%w: at most %d keys; revoke some first", ErrInvalid, MaxKeys)
	}
	var random [6 + 32]byte // the id, then the secret
	if _, err := rand.Read(random[:]); err != nil {
		return Key{}, "", err
	}
	k := Key{ID: hex.EncodeToString(random[:6]), Name: name, Role: role, Expires: expires, Created: now.UTC(), CreatedBy: by}
	plain := secretPrefix + k.ID + "_" + base64.RawURLEncoding.EncodeToString(random[6:])
	sum := sha256.Sum256([]byte(plain))
	k.Digest = sum[:]
	b, err := json.Marshal(k)
	if err != nil {
		return Key{}, "", err
	}
	rev, err := s.kv.Create(ctx, kvmap.Key(name), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return Key{}, "", ErrConflict
	} else if err != nil {
		return Key{}, "", fmt.Errorf("store key: %w", err)
	}
	s.keys.Put(name, k, rev)
	return k.Public(), plain, nil
}

// Revoke deletes the key named name: it is refused from then on, by every
// ingest-api copy within milliseconds.
func (s *Store) Revoke(ctx context.Context, name string) (Key, error) {
	if s.kv == nil {
		return Key{}, ErrNotFound
	}
	e, err := s.kv.Get(ctx, kvmap.Key(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("read key: %w", err)
	}
	var k Key
	_ = json.Unmarshal(e.Value(), &k)
	if err := s.kv.Delete(ctx, kvmap.Key(name), jetstream.LastRevision(e.Revision())); err != nil {
		return Key{}, fmt.Errorf("revoke key: %w", err)
	}
	s.keys.Remove(name, e.Revision()+1) // the delete's revision is later than the put's
	return k.Public(), nil
}

func checkName(name string) error {
	if name == "" || len(name) > 64 || name == BootstrapName {
		return fmt.Errorf("%w: name must be 1 to 64 characters, and not %q", ErrInvalid, BootstrapName)
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: name must be text without control characters", ErrInvalid)
		}
	}
	return nil
}
