package registry

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"
)

// MinKeyLen is the shortest TOKEN_KEY accepted: 32 bytes (make run and the
// manifests generate 64 hex digits).
const MinKeyLen = 32

// Keyring turns device tokens and admin keys into what is kept of them,
// under TOKEN_KEY, which only ingest-api holds:
//   - a digest that authenticates: HMAC-SHA256 under a subkey, so that a
//     leaked registry cannot be searched offline for tokens without the key;
//   - the token sealed for the device overview: AES-256-GCM under another
//     subkey, bound to the serial and the token's name, so that a sealed
//     token copied into another record does not open.
//
// It reads what either of its keys made (TOKEN_KEY's current one and the
// one after the comma) and writes under one of them: the current key,
// unless the other ingest-api copies cannot read it yet (Census chooses).
type Keyring struct {
	keys  []*tokenKey // the current key first
	write atomic.Pointer[tokenKey]
}

// tokenKey is the subkeys of one TOKEN_KEY.
type tokenKey struct {
	id     string // names the key in what it made (not secret: a digest of it)
	digest []byte
	aead   cipher.AEAD
	pool   sync.Pool // *summer under digest
}

// NewKeyring derives the subkeys of key; previous, if not empty, is the key
// being replaced. It writes under key until WriteUnder says otherwise.
func NewKeyring(key, previous string) (*Keyring, error) {
	cur, err := newTokenKey(key)
	if err != nil {
		return nil, err
	}
	k := &Keyring{keys: []*tokenKey{cur}}
	if previous != "" {
		prev, err := newTokenKey(previous)
		if err != nil {
			return nil, fmt.Errorf("previous key: %w", err)
		}
		if prev.id != cur.id {
			k.keys = append(k.keys, prev)
		}
	}
	k.write.Store(cur)
	return k, nil
}

func newTokenKey(key string) (*tokenKey, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("token key must be at least %d bytes (64 hex digits from a random source)", MinKeyLen)
	}
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte("devicehub token key: " + label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(sub("seal"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	t := &tokenKey{id: hex.EncodeToString(sub("id")[:6]), digest: sub("digest"), aead: aead}
	t.pool.New = func() any { return &summer{h: hmac.New(sha256.New, t.digest)} }
	return t, nil
}

// ID names the key records are written under (12 hex digits), so that a
// record made under another key is recognised.
func (k *Keyring) ID() string { return k.writer().id }

// IDs names the keys the ring reads, the current one first.
func (k *Keyring) IDs() []string {
	out := make([]string, len(k.keys))
	for i, t := range k.keys {
		out[i] = t.id
	}
	return out
}

// WriteUnder makes the ring write under its key named id, and reports
// whether it holds one.
func (k *Keyring) WriteUnder(id string) bool {
	t := k.under(id)
	if t != nil {
		k.write.Store(t)
	}
	return t != nil
}

// writer is the key to write under: callers that make a digest and a
// sealed copy take it once, so that both are under the same key.
func (k *Keyring) writer() *tokenKey { return k.write.Load() }

// Digest is the keyed digest of secret, under the key written under.
func (k *Keyring) Digest(secret string) [sha256.Size]byte { return k.writer().sum(secret) }

// Seal encrypts token for the record of serial, under its name, under the
// key written under.
func (k *Keyring) Seal(serial, name, token string) ([]byte, error) {
	return k.writer().seal(serial, name, token)
}

// ErrKey is returned for a token sealed under a key this ring does not hold,
// or altered.
var ErrKey = errors.New("token sealed under another TOKEN_KEY, or altered")

// Open decrypts a token that Seal made for serial and name, under either
// key (keyID says which).
func (k *Keyring) Open(keyID, serial, name string, sealed []byte) (string, error) {
	t := k.under(keyID)
	if t == nil || len(sealed) < t.aead.NonceSize() {
		return "", ErrKey
	}
	n := t.aead.NonceSize()
	plain, err := t.aead.Open(nil, sealed[:n], sealed[n:], sealContext(serial, name))
	if err != nil {
		return "", ErrKey
	}
	return string(plain), nil
}

// Holds reports whether the ring reads what key keyID made.
func (k *Keyring) Holds(keyID string) bool { return k.under(keyID) != nil }

// under returns the key named keyID, or nil.
func (k *Keyring) under(keyID string) *tokenKey {
	for _, t := range k.keys {
		if t.id == keyID {
			return t
		}
	}
	return nil
}

// summer is a pooled HMAC with buffers of its own: a token and its sum
// pass through them, not through new slices on every request.
type summer struct {
	h   hash.Hash
	in  []byte
	out [sha256.Size]byte
}

func (t *tokenKey) sum(secret string) [sha256.Size]byte {
	m := t.pool.Get().(*summer) // reset when put back (or new)
	m.in = append(m.in[:0], secret...)
	m.h.Write(m.in)
	m.h.Sum(m.out[:0])
	out := m.out
	// No token stays behind in the pool: not in the buffer, nor in the
	// hash's own block (Reset empties it), nor a huge token's buffer.
	clear(m.in)
	m.h.Reset()
	if cap(m.in) > 1024 {
		m.in = nil
	}
	t.pool.Put(m)
	return out
}

func (t *tokenKey) seal(serial, name, token string) ([]byte, error) {
	nonce := make([]byte, t.aead.NonceSize(), t.aead.NonceSize()+len(token)+t.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal token: %w", err)
	}
	return t.aead.Seal(nonce, nonce, []byte(token), sealContext(serial, name)), nil
}

func sealContext(serial, name string) []byte {
	// Lengths first: no two (serial, name) pairs give the same bytes.
	return fmt.Appendf(nil, "%d:%s:%d:%s", len(serial), serial, len(name), name)
}
