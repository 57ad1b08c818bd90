package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
)

// How often each copy announces itself, and how long an announcement
// lasts unless renewed: a copy that stopped without withdrawing (killed,
// cut off from NATS) counts as live for up to announceTTL.
const (
	announceEvery = 2 * time.Second
	announceTTL   = 10 * time.Second
)

// Census is how the ingest-api copies of a deployment agree on the
// TOKEN_KEY records are written under, so that a rolling restart onto
// other keys (TOKEN_KEY=<new>,<old>) never leaves a copy with records it
// cannot read. Each copy announces, in a KV bucket whose entries expire,
// the keys it reads; every copy writes under the newest of its own keys
// that every live copy reads (its Keyring's WriteUnder), and rewrites
// records toward that key only while they agree (Store.KeepUpgraded).
type Census struct {
	kv      jetstream.KeyValue
	self    string // this copy's key in the bucket
	keys    *Keyring
	log     *zap.Logger
	agreed  atomic.Bool
	changed chan struct{} // a token whenever the copies agree on another key
	ready   chan struct{}
	once    sync.Once
	state   string // what was last logged
}

// announcement is one copy's entry: the ids of the keys it reads (not
// secret: digests of them).
type announcement struct {
	Keys []string `json:"keys"`
}

// OpenCensus creates the bucket if it is missing and returns the census of
// the copies for k, which it keeps writing under the agreed key. Run must
// be called to announce this copy and follow the others.
func OpenCensus(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, k *Keyring, log *zap.Logger) (*Census, error) {
	var kv jetstream.KeyValue
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		kv, err = bus.EnsureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "ingest-api copies and the TOKEN_KEYs each reads (an entry expires unless its copy renews it)",
			History:     1,
			TTL:         announceTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		}, log)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open census bucket %q: %w", bucket, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("name this copy: %w", err)
	}
	return &Census{kv: kv, self: hex.EncodeToString(id[:]), keys: k, log: log,
		changed: make(chan struct{}, 1), ready: make(chan struct{})}, nil
}

// Ready is closed at the first round that sees this copy's announcement
// (announceEvery after Run starts), so that the other copies have seen it
// before this one serves.
func (c *Census) Ready() <-chan struct{} { return c.ready }

// Agreed reports whether every live copy reads the key this one writes
// under.
func (c *Census) Agreed() bool { return c.agreed.Load() }

// Changed receives a token whenever the copies come to agree on a key.
func (c *Census) Changed() <-chan struct{} { return c.changed }

// Run announces this copy every announceEvery and follows the others'
// announcements, deciding at each round, until ctx ends; then it
// withdraws the announcement.
func (c *Census) Run(ctx context.Context) error {
	w, err := c.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("follow the token key census: %w", err)
	}
	defer func() { _ = w.Stop() }()
	defer c.withdraw()
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	seen := map[string]seenCopy{}
	c.announce(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the token key census watch ended")
			}
			if e != nil {
				seen[e.Key()] = seenCopy{keys: decodeKeys(e), at: time.Now(), gone: e.Operation() != jetstream.KeyValuePut}
			}
		case now := <-t.C:
			c.announce(ctx)
			c.decide(c.live(seen, now))
		}
	}
}

// seenCopy is a copy's announcement as this one last saw it.
type seenCopy struct {
	keys []string
	at   time.Time // when this copy saw it
	gone bool      // withdrawn
}

func decodeKeys(e jetstream.KeyValueEntry) []string {
	var a announcement
	if json.Unmarshal(e.Value(), &a) != nil {
		return nil // a copy whose keys cannot be told might read none of ours
	}
	return a.Keys
}

// live returns the key sets of the copies seen announcing within
// announceTTL, and forgets the others; nil when this copy's own
// announcement is not among them (its watch or its announcements
// stalled: the census is unknown, not empty).
func (c *Census) live(seen map[string]seenCopy, now time.Time) [][]string {
	var sets [][]string
	for id, sc := range seen {
		if sc.gone || now.Sub(sc.at) > announceTTL {
			delete(seen, id)
			continue
		}
		sets = append(sets, sc.keys)
	}
	if _, ok := seen[c.self]; !ok {
		return nil
	}
	return sets
}

// announce puts this copy's entry, with the keys it reads.
func (c *Census) announce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, announceEvery)
	defer cancel()
	b, _ := json.Marshal(announcement{Keys: c.keys.IDs()})
	if _, err := c.kv.Put(ctx, c.self, b); err != nil && ctx.Err() == nil {
		c.log.Warn("announce to the token key census", zap.Error(err))
	}
}

// decide writes under the newest of this copy's keys that every set
// holds; with none in common, or no census, it keeps its key and
// rewrites nothing.
func (c *Census) decide(sets [][]string) {
	if sets == nil {
		c.agreed.Store(false)
		c.logState("unknown", func() {
			c.log.Warn("this copy's token key announcement is not seen: records are not rewritten until it is")
		})
		return
	}
	defer c.once.Do(func() { close(c.ready) })
	id, ok := common(c.keys.IDs(), sets)
	was := c.keys.ID()
	if ok {
		c.keys.WriteUnder(id)
	}
	if ok && (!c.agreed.Load() || id != was) {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	c.agreed.Store(ok)
	if !ok {
		c.logState("none in common", func() {
			c.log.Error("the ingest-api copies hold no TOKEN_KEY in common: records stay as they are, and a copy answers 503 for devices whose tokens are under keys it does not hold; start the copies with TOKEN_KEY=<new>,<old>",
				zap.Strings("keys", c.keys.IDs()), zap.Int("copies", len(sets)))
		})
		return
	}
	c.logState("agreed "+id, func() {
		c.log.Info("every ingest-api copy reads this token key: records are written under it", zap.String("key", id), zap.Int("copies", len(sets)))
	})
}

// logState logs, once per change of state, what the census decided.
func (c *Census) logState(state string, log func()) {
	if state != c.state {
		c.state = state
		log()
	}
}

// common returns the first of mine that every one of sets holds.
func common(mine []string, sets [][]string) (string, bool) {
	for _, id := range mine {
		if !slices.ContainsFunc(sets, func(s []string) bool { return !slices.Contains(s, id) }) {
			return id, true
		}
	}
	return "", false
}

// withdrawTimeout bounds the withdrawal at shutdown (else the entry
// expires by itself).
const withdrawTimeout = 2 * time.Second

// withdraw removes this copy's announcement, so that the others need not
// wait for it to expire. Run's context has ended: it uses one of its own.
func (c *Census) withdraw() {
	ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
	defer cancel()
	if err := c.kv.Delete(ctx, c.self); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		c.log.Warn("withdraw from the token key census", zap.Error(err))
	}
}
