package registry

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"strings"

	"github.com/devicehub/eventservice/pkg/kvmap"
)

// Route is where the value of one connected device input is stored.
type Route struct {
	Entity string
	Input  string
}

// Entry is a device as the request path needs it: the record plus what is
// derived from it once per update instead of once per request. Its Device
// holds the tokens' names, not their digests or sealed values.
type Entry struct {
	Device Device
	// Rev is the registry revision of this record. Events carry the revision
	// they were accepted under, so a worker whose copy lags can wait for it.
	Rev    uint64
	tokens []entryToken
	routes map[string]Route
}

// entryToken is what authenticates one token. A record written before
// tokens were kept as digests (key "") holds an unkeyed SHA-256 of it
// until ingest-api upgrades the record, seconds after it starts.
type entryToken struct {
	name, key string
	digest    [sha256.Size]byte
}

// NewEntry derives the entry of record d at revision rev (writer-worker's
// backfill makes one from a job's snapshot of the mapping).
func NewEntry(d Device, rev uint64) *Entry {
	e := &Entry{Device: d, Rev: rev}
	if d.AccessToken != "" {
		e.tokens = append(e.tokens, entryToken{name: "token-1", digest: sha256.Sum256([]byte(d.AccessToken))})
		e.Device.AccessToken = ""
	}
	e.Device.Tokens = make([]Token, len(d.Tokens))
	for i, t := range d.Tokens {
		et := entryToken{name: t.Name, key: t.Key}
		copy(et.digest[:], t.Digest)
		e.tokens = append(e.tokens, et)
		e.Device.Tokens[i] = Token{Name: t.Name, Created: t.Created, Key: t.Key}
	}
	for _, in := range d.Inputs {
		if in.Entity == "" {
			continue
		}
		if e.routes == nil {
			e.routes = make(map[string]Route, len(d.Inputs))
		}
		e.routes[in.Name] = Route{Entity: in.Entity, Input: in.EntityInput}
	}
	return e
}

// Authenticate returns the name of the device's token that one of secrets
// is (the first that is), comparing keyed digests in constant time, so
// the time is independent of the tokens' lengths too.
func (e *Entry) Authenticate(k *Keyring, secrets ...string) (name string, ok bool) {
	for _, s := range secrets {
		if s == "" {
			continue
		}
		var written *[sha256.Size]byte // under the key written under: computed once per secret
		var w *tokenKey
		if k != nil {
			w = k.writer()
		}
		for i := range e.tokens {
			t := &e.tokens[i]
			var dg [sha256.Size]byte
			switch {
			case t.key == "":
				dg = sha256.Sum256([]byte(s))
			case k == nil:
				continue
			case t.key == w.id:
				if written == nil {
					d := w.sum(s)
					written = &d
				}
				dg = *written
			default:
				r := k.under(t.key)
				if r == nil {
					continue
				}
				dg = r.sum(s)
			}
			if subtle.ConstantTimeCompare(dg[:], t.digest[:]) == 1 {
				return t.name, true
			}
		}
	}
	return "", false
}

// Unreadable reports whether one of the device's tokens is under a
// TOKEN_KEY k does not hold: a secret that matched none of the others
// may be that one, so its failure is not the device's (a copy started on
// other keys than the copy that wrote the record).
func (e *Entry) Unreadable(k *Keyring) bool {
	for _, t := range e.tokens {
		if t.key != "" && (k == nil || !k.Holds(t.key)) {
			return true
		}
	}
	return false
}

// AcceptsAPI reports whether the device may post over this HTTP interface.
func (e *Entry) AcceptsAPI() bool { return e.Device.ConnectionType == ConnectionAPI }

// Route returns where a value for device input name is stored, if anywhere.
func (e *Entry) Route(name string) (Route, bool) {
	r, ok := e.routes[name]
	return r, ok
}

// Connected reports whether any input is connected to an entity.
func (e *Entry) Connected() bool { return len(e.routes) > 0 }

// Cache is the in-memory copy of the registry: serial -> Entry.
type Cache struct {
	*kvmap.Map[*Entry]
}

// NewCache returns an empty cache that is not yet synced.
func NewCache() *Cache { return &Cache{kvmap.New[*Entry]()} }

// Put applies a device record at revision rev.
func (c *Cache) Put(d Device, rev uint64) { c.Map.Put(d.Serial, NewEntry(d, rev), rev) }

// Devices returns, in serial order, up to limit devices whose serial starts
// with prefix and sorts after after; more reports whether others follow.
// It sorts the matching serials on every call: a workspace's listing, not a
// request-path lookup.
func (c *Cache) Devices(prefix, after string, limit int) (_ []Device, more bool) {
	var serials []string
	c.Range(func(serial string, _ *Entry) bool {
		if serial > after && strings.HasPrefix(serial, prefix) {
			serials = append(serials, serial)
		}
		return true
	})
	slices.Sort(serials)
	if more = len(serials) > limit; more {
		serials = serials[:limit]
	}
	out := make([]Device, 0, len(serials))
	for _, serial := range serials {
		if e, ok := c.Lookup(serial); ok { // gone meanwhile: left out
			out = append(out, e.Device)
		}
	}
	return out, more
}

// Stale returns the serials whose records are not in the form key keyID
// makes: tokens in the clear, or under another key (see Store.Upgrade).
func (c *Cache) Stale(keyID string) []string {
	var out []string
	c.Range(func(serial string, e *Entry) bool {
		if slices.ContainsFunc(e.tokens, func(t entryToken) bool { return t.key != keyID }) {
			out = append(out, serial)
		}
		return true
	})
	return out
}

// EntityInputs returns every connected entity input, by entity then input,
// with the device inputs that feed it.
func (c *Cache) EntityInputs() map[string]map[string][]Feed {
	out := make(map[string]map[string][]Feed)
	c.Range(func(serial string, e *Entry) bool {
		for name, r := range e.routes {
			if out[r.Entity] == nil {
				out[r.Entity] = make(map[string][]Feed)
			}
			out[r.Entity][r.Input] = append(out[r.Entity][r.Input], Feed{Serial: serial, DeviceInput: name})
		}
		return true
	})
	return out
}

// Feed is a device input connected to an entity input.
type Feed struct {
	Serial      string `json:"serial"`
	DeviceInput string `json:"deviceInput"`
}
