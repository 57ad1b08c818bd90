package registry

import (
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"strings"
	"sync"
	"time"
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

func newEntry(d Device, rev uint64) *Entry {
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
		var current *[sha256.Size]byte // computed once per secret
		for i := range e.tokens {
			t := &e.tokens[i]
			var dg [sha256.Size]byte
			switch {
			case t.key == "":
				dg = sha256.Sum256([]byte(s))
			case k == nil:
				continue
			case t.key == k.id:
				if current == nil {
					d := k.Digest(s)
					current = &d
				}
				dg = *current
			default:
				r := k.under(t.key)
				if r == nil {
					continue
				}
				dg = r.Digest(s)
			}
			if subtle.ConstantTimeCompare(dg[:], t.digest[:]) == 1 {
				return t.name, true
			}
		}
	}
	return "", false
}

// stale reports whether the record is not in the form key keyID makes.
func (e *Entry) stale(keyID string) bool {
	for _, t := range e.tokens {
		if t.key != keyID {
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

type slot struct {
	rev   uint64
	entry *Entry // nil: deleted at rev
}

// Cache is the in-memory copy of the registry. Updates come from the KV watch
// and from this process's own writes; a per-key revision keeps a late watch
// delivery from undoing a newer local write.
type Cache struct {
	mu      sync.RWMutex
	devices map[string]slot
	live    int
	changed time.Time // when a change last took effect
	synced  chan struct{}
	once    sync.Once
}

// NewCache returns an empty cache that is not yet synced.
func NewCache() *Cache {
	return &Cache{devices: make(map[string]slot), synced: make(chan struct{})}
}

// Lookup returns the device with serial, if the cache holds it.
func (c *Cache) Lookup(serial string) (*Entry, bool) {
	c.mu.RLock()
	s, ok := c.devices[serial]
	c.mu.RUnlock()
	if !ok || s.entry == nil {
		return nil, false
	}
	return s.entry, true
}

// Put applies a device record at revision rev.
func (c *Cache) Put(d Device, rev uint64) {
	e := newEntry(d, rev)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.devices[d.Serial]
	if ok && old.rev >= rev {
		return
	}
	if !ok || old.entry == nil {
		c.live++
	}
	c.devices[d.Serial] = slot{rev: rev, entry: e}
	c.changed = time.Now()
}

// Remove deletes serial as of revision rev.
func (c *Cache) Remove(serial string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.devices[serial]
	if ok && old.rev > rev {
		return
	}
	if ok && old.entry != nil {
		c.live--
	}
	c.devices[serial] = slot{rev: rev}
	c.changed = time.Now()
}

// LastChange is when a record last changed in this copy (zero: never).
func (c *Cache) LastChange() time.Time {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// Len is the number of devices held.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.live
}

// Synced is closed once the initial contents of the bucket have been loaded.
func (c *Cache) Synced() <-chan struct{} { return c.synced }

// IsSynced reports whether Synced is closed.
func (c *Cache) IsSynced() bool {
	select {
	case <-c.synced:
		return true
	default:
		return false
	}
}

func (c *Cache) markSynced() { c.once.Do(func() { close(c.synced) }) }

// Devices returns, in serial order, up to limit devices whose serial starts
// with prefix and sorts after after; more reports whether others follow.
// It sorts the matching serials on every call: a workspace's listing, not a
// request-path lookup.
func (c *Cache) Devices(prefix, after string, limit int) (_ []Device, more bool) {
	c.mu.RLock()
	var serials []string
	for serial, s := range c.devices {
		if s.entry != nil && serial > after && strings.HasPrefix(serial, prefix) {
			serials = append(serials, serial)
		}
	}
	c.mu.RUnlock()
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
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for serial, s := range c.devices {
		if s.entry != nil && s.entry.stale(keyID) {
			out = append(out, serial)
		}
	}
	return out
}

// EntityInputs returns every connected entity input, by entity then input,
// with the device inputs that feed it.
func (c *Cache) EntityInputs() map[string]map[string][]Feed {
	out := make(map[string]map[string][]Feed)
	c.mu.RLock()
	defer c.mu.RUnlock()
	for serial, s := range c.devices {
		if s.entry == nil {
			continue
		}
		for name, r := range s.entry.routes {
			if out[r.Entity] == nil {
				out[r.Entity] = make(map[string][]Feed)
			}
			out[r.Entity][r.Input] = append(out[r.Entity][r.Input], Feed{Serial: serial, DeviceInput: name})
		}
	}
	return out
}

// Feed is a device input connected to an entity input.
type Feed struct {
	Serial      string `json:"serial"`
	DeviceInput string `json:"deviceInput"`
}
