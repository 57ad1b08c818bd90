package registry

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// MaxTokens is how many tokens a device holds at once: a primary and a
// secondary, so that a fleet's firmware moves from one to the other over
// days (add, promote, retire) while both authenticate.
const MaxTokens = 2

// maxTokenName bounds a token's name.
const maxTokenName = 64

// Token is what the registry keeps of one device token: never the token
// itself (see Keyring).
type Token struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Key is the Keyring ID that Digest and Sealed were made under.
	Key    string `json:"key"`
	Digest []byte `json:"digest"`
	Sealed []byte `json:"sealed"`
}

// ErrConflict marks a token change the device's tokens do not allow (a
// third token, retiring the last one, a name or token in use).
var ErrConflict = errors.New("token conflict")

// ErrNoToken is returned for a token name the device does not have.
var ErrNoToken = errors.New("no such token")

// TokenInfo is what the workspace API shows of a token.
type TokenInfo struct {
	Name    string    `json:"name"`
	Primary bool      `json:"primary"`
	Created time.Time `json:"created"`
}

// View is a device as the workspace API answers it: the tokens by name
// only (Reveal shows one, and is audited).
type View struct {
	Serial         string      `json:"serial"`
	ConnectionType string      `json:"connectionType"`
	Tokens         []TokenInfo `json:"tokens"`
	Inputs         []Input     `json:"inputs"`
	TimestampInput string      `json:"timestampInput,omitempty"`
}

// View returns what the workspace API shows of d.
func (d *Device) View() View {
	v := View{Serial: d.Serial, ConnectionType: d.ConnectionType, Inputs: d.Inputs, TimestampInput: d.TimestampInput,
		Tokens: make([]TokenInfo, 0, len(d.Tokens))}
	for i, t := range d.Tokens {
		v.Tokens = append(v.Tokens, TokenInfo{Name: t.Name, Primary: i == 0, Created: t.Created})
	}
	if v.Inputs == nil {
		v.Inputs = []Input{}
	}
	return v
}

func checkToken(secret string) error {
	if secret == "" || len(secret) > MaxTokenLen || !utf8.ValidString(secret) {
		return fmt.Errorf("%w: a token must be valid UTF-8 of 1 to %d bytes", ErrInvalid, MaxTokenLen)
	}
	return nil
}

// AddToken gives d another token named name (token-<n> when empty), with
// value secret (generated when empty), as its secondary; it returns the
// token, which is not kept anywhere in the clear.
func (d *Device) AddToken(k *Keyring, name, secret string, now time.Time) (string, error) {
	return d.addToken(k, k.writer(), name, secret, now)
}

// addToken is AddToken writing under w, one of k's keys.
func (d *Device) addToken(k *Keyring, w *tokenKey, name, secret string, now time.Time) (string, error) {
	if len(d.Tokens) >= MaxTokens {
		return "", fmt.Errorf("%w: the device holds %d tokens; retire one first", ErrConflict, MaxTokens)
	}
	if name == "" {
		name = "token-" + strconv.Itoa(d.TokenSeq+1)
	}
	if err := checkName("token name", name, maxTokenName); err != nil {
		return "", err
	}
	for _, t := range d.Tokens {
		if t.Name == name {
			return "", fmt.Errorf("%w: the device has a token named %q", ErrConflict, name)
		}
	}
	if secret == "" { // 128 random bits, hex encoded
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("generate token: %w", err)
		}
		secret = hex.EncodeToString(b[:])
	} else if err := checkToken(secret); err != nil {
		return "", err
	} else if d.tokenIndex(k, secret) >= 0 {
		return "", fmt.Errorf("%w: the device already has this token", ErrConflict)
	}
	sealed, err := w.seal(d.Serial, name, secret)
	if err != nil {
		return "", err
	}
	dg := w.sum(secret)
	d.Tokens = append(d.Tokens, Token{Name: name, Created: now.UTC(), Key: w.id, Digest: dg[:], Sealed: sealed})
	d.TokenSeq++
	return secret, nil
}

// SetToken makes secret the device's only token (a PUT that names one: the
// immediate cut-over for a token that leaked). It reports whether anything
// changed: a device whose only token is already secret keeps it as it is.
func (d *Device) SetToken(k *Keyring, secret string, now time.Time) (bool, error) {
	if err := checkToken(secret); err != nil {
		return false, err
	}
	if len(d.Tokens) == 1 && d.tokenIndex(k, secret) == 0 {
		return false, nil
	}
	d.Tokens = nil
	_, err := d.AddToken(k, "", secret, now)
	return err == nil, err
}

// Promote makes the token named name the primary.
func (d *Device) Promote(name string) error {
	i := d.named(name)
	if i < 0 {
		return ErrNoToken
	}
	d.Tokens[0], d.Tokens[i] = d.Tokens[i], d.Tokens[0]
	return nil
}

// Retire removes the token named name; the last token cannot go.
func (d *Device) Retire(name string) error {
	i := d.named(name)
	if i < 0 {
		return ErrNoToken
	}
	if len(d.Tokens) == 1 {
		return fmt.Errorf("%w: %q is the device's only token; add another first", ErrConflict, name)
	}
	d.Tokens = append(d.Tokens[:i:i], d.Tokens[i+1:]...)
	return nil
}

// Reveal decrypts the token named name.
func (d *Device) Reveal(k *Keyring, name string) (string, error) {
	i := d.named(name)
	if i < 0 {
		return "", ErrNoToken
	}
	t := d.Tokens[i]
	return k.Open(t.Key, d.Serial, t.Name, t.Sealed)
}

// Upgrade rewrites d's tokens in the current form: a token kept in the
// clear (a record from before tokens were digests) becomes token-1, and
// a token made under another TOKEN_KEY is made again under the one k
// writes under. It reports whether d changed.
func (d *Device) Upgrade(k *Keyring, now time.Time) (bool, error) {
	w := k.writer()
	changed := false
	if d.AccessToken != "" {
		secret := d.AccessToken
		d.AccessToken = ""
		if d.tokenIndex(k, secret) < 0 {
			if _, err := d.addToken(k, w, "", secret, now); err != nil {
				return false, err
			}
		}
		changed = true
	}
	for i := range d.Tokens {
		t := &d.Tokens[i]
		if t.Key == w.id {
			continue
		}
		secret, err := k.Open(t.Key, d.Serial, t.Name, t.Sealed)
		if err != nil {
			return false, fmt.Errorf("token %q: %w", t.Name, err)
		}
		if t.Sealed, err = w.seal(d.Serial, t.Name, secret); err != nil {
			return false, err
		}
		dg := w.sum(secret)
		t.Digest, t.Key = dg[:], w.id
		changed = true
	}
	return changed, nil
}

func (d *Device) named(name string) int {
	for i, t := range d.Tokens {
		if t.Name == name {
			return i
		}
	}
	return -1
}

// tokenIndex is the index of the token whose digest is secret's, or -1.
func (d *Device) tokenIndex(k *Keyring, secret string) int {
	for i, t := range d.Tokens {
		if r := k.under(t.Key); r != nil {
			dg := r.sum(secret)
			if subtle.ConstantTimeCompare(dg[:], t.Digest) == 1 {
				return i
			}
		}
	}
	return -1
}
