package idem

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
)

// Seen tells, without asking ClickHouse, that a keyed event has had no
// earlier attempt within the window: the common case, a first attempt.
//
// Every attempt that enters the pipeline first takes its request's claim
// in the claims log (one claim per request, event.ClaimID), and a second
// attempt can take it only after the first's has expired,
// bus.PipelineWindow later. So an earlier attempt of an event checked now
// has a claim at least that old. Seen keeps a filter of every claim taken
// holdFor (half the pipeline window) ago or more, from the writer's one
// reading of the claims log (pkg/claimlog: Seen is its Tap) and, for the
// window before that reading started, of the event ids in event_keys. An
// event neither of whose ids (its own, its claim's) is in it has had no
// earlier attempt: its own claim is younger than holdFor. One in it (an
// earlier attempt, its own claim past hold, or a false hit of the filter)
// is looked up as before.
//
// Seen answers only while it is complete (event_keys read since the
// reading last started, or last told of claims that may have expired
// unread) and the reading was known caught up less than freshFor ago (the
// server had delivered every claim, and this copy had taken them in).
type Seen struct {
	keys   KeyFeed
	window time.Duration
	log    *zap.Logger
	// hold and fresh: holdFor and freshFor, but in tests.
	hold, fresh time.Duration
	wake        chan struct{} // the reading asks for event_keys

	mu      sync.Mutex
	f       *filter
	held    []claimSeen    // claims taken less than hold ago, oldest first
	heldIDs map[string]int // the ids in held, and how often
	// asked counts the reads of event_keys the reading asked for;
	// started and loaded are the count when the last read began, and when
	// the last one done began. Complete: loaded equals asked.
	asked, started, loaded uint64
	starting               bool // a reading started and has read nothing yet
	// caughtUpAt is when the reading was last known to have delivered,
	// and this copy taken in, every claim in the stream.
	caughtUpAt  time.Time
	minOffset   time.Duration // receipt minus server time, the least seen
	offsetKnown bool
}

// KeyFeed is what Seen reads of ClickHouse at each start of the reading:
// event_keys' rows.
type KeyFeed interface {
	EachKey(ctx context.Context, sinceNs int64, fn func(id string, tsNs int64)) error
}

// claimSeen is a claim taken in: its id, and when the stream stored it
// (the server's clock; settle puts it on this copy's with minOffset).
type claimSeen struct {
	id string
	ts time.Time
}

// FilterBytes is the memory of a writer copy's filter: false hits near 1
// in 1,000 keyed events up to ~200 keyed events/s sustained over a 24 h
// window; more make them likelier (each costs a lookup), never wrong.
const FilterBytes = 64 << 20

// holdFor is how long after it was taken a claim's id joins the filter;
// freshFor, how long the reading may go without being known caught up
// before Seen stops answering.
const (
	holdFor  = bus.PipelineWindow / 2
	freshFor = bus.PipelineWindow / 4
)

// NewSeen returns a Seen over window with a filter of bytes at most, fed
// by the claims log's reading it is the Tap of; Run reads event_keys when
// that reading asks.
func NewSeen(keys KeyFeed, window time.Duration, bytes int, log *zap.Logger) *Seen {
	return &Seen{keys: keys, window: window, log: log, hold: holdFor, fresh: freshFor, wake: make(chan struct{}, 1),
		f: newFilter(window, bytes), heldIDs: map[string]int{}}
}

// FirstAttempt reports whether the keyed event id, a single reading (its
// claim is its own id), certainly had no earlier attempt within the window.
// false means "not known": look it up.
func (s *Seen) FirstAttempt(id string) bool { return s.FirstAttempts([]string{id}, []string{id})[0] }

// FirstAttempts is FirstAttempt of each of ids, under one lock; claims[i]
// is the id ids[i]'s request claimed (event.ClaimID). An earlier attempt
// shows as its claim (the claims' feed) or its event id (event_keys). A
// backlog message's own id is never claimed by this release: a claim of
// it, however young, is an attempt by a copy of 1.0.0 (a claim per
// message), which a retry through this release's one claim would not
// wait for: it is looked up.
func (s *Seen) FirstAttempts(ids, claims []string) []bool {
	first := make([]bool, len(ids))
	if s == nil {
		return first
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete() || now.Sub(s.caughtUpAt) > s.fresh {
		return first
	}
	s.settle(now)
	for i, id := range ids {
		first[i] = !s.f.has(id) && (claims[i] == id || !s.f.has(claims[i]) && s.heldIDs[id] == 0)
	}
	return first
}

// Complete reports whether FirstAttempt can answer.
func (s *Seen) Complete() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.complete() && time.Since(s.caughtUpAt) <= s.fresh
}

// complete reports whether event_keys was read since the reading last
// asked for it. s.mu is held.
func (s *Seen) complete() bool { return s.asked != 0 && s.loaded == s.asked }
