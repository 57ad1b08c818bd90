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
// A previous key (TOKEN_KEY's second) is kept only to read what it made
// while the registry is upgraded to the current one.
type Keyring struct {
	id       string // names the key in what it made (not secret: a digest of it)
	digest   []byte
	aead     cipher.AEAD
	pool     sync.Pool // hash.Hash under digest
	previous *Keyring
}

// NewKeyring derives the subkeys of key; previous, if not empty, is the key
// being replaced.
func NewKeyring(key, previous string) (*Keyring, error) {
	k, err := newKeyring(key)
	if err != nil {
		return nil, err
	}
	if previous != "" {
		if k.previous, err = newKeyring(previous); err != nil {
			return nil, fmt.Errorf("previous key: %w", err)
		}
		if k.previous.id == k.id {
			k.previous = nil
		}
	}
	return k, nil
}

func newKeyring(key string) (*Keyring, error) {
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
	k := &Keyring{id: hex.EncodeToString(sub("id")[:6]), digest: sub("digest"), aead: aead}
	k.pool.New = func() any { return hmac.New(sha256.New, k.digest) }
	return k, nil
}

// ID names the key (12 hex digits), so that a record made under another
// key is recognised.
func (k *Keyring) ID() string { return k.id }

// Digest is the keyed digest of secret.
func (k *Keyring) Digest(secret string) [sha256.Size]byte {
	m := k.pool.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(secret))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	k.pool.Put(m)
	return out
}

// Seal encrypts token for the record of serial, under its name.
func (k *Keyring) Seal(serial, name, token string) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(token)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal token: %w", err)
	}
	return k.aead.Seal(nonce, nonce, []byte(token), sealContext(serial, name)), nil
}

// ErrKey is returned for a token sealed under a key this ring does not hold,
// or altered.
var ErrKey = errors.New("token sealed under another TOKEN_KEY, or altered")

// Open decrypts a token that Seal made for serial and name, under this
// key or the previous one (keyID says which).
func (k *Keyring) Open(keyID, serial, name string, sealed []byte) (string, error) {
	r := k.under(keyID)
	if r == nil || len(sealed) < r.aead.NonceSize() {
		return "", ErrKey
	}
	n := r.aead.NonceSize()
	plain, err := r.aead.Open(nil, sealed[:n], sealed[n:], sealContext(serial, name))
	if err != nil {
		return "", ErrKey
	}
	return string(plain), nil
}

// under returns the ring of key keyID: this one or the previous one.
func (k *Keyring) under(keyID string) *Keyring {
	switch {
	case keyID == k.id:
		return k
	case k.previous != nil && keyID == k.previous.id:
		return k.previous
	}
	return nil
}

func sealContext(serial, name string) []byte {
	// Lengths first: no two (serial, name) pairs give the same bytes.
	return fmt.Appendf(nil, "%d:%s:%d:%s", len(serial), serial, len(name), name)
}
