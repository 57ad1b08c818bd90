package idem

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Seen tells, without asking ClickHouse, that a keyed event has had no
// earlier attempt within the window: the common case, a first attempt.
//
// Every attempt that enters the pipeline first takes its claim in the
// claims stream (ingest-api/internal/claim), and a second attempt can take
// one only after the first's has expired, bus.PipelineWindow later. So an
// earlier attempt of an event checked now has a claim at least that old.
// Seen keeps a filter of every event id with a claim older than holdFor
// (half the pipeline window), from the claims stream as it is written and,
// for the window before this copy started, from event_keys. An event whose
// id is not in it has had no earlier attempt: its own claim is younger than
// holdFor. An id in it (an earlier attempt, its own claim past hold, or a
// false hit of the filter) is looked up as before.
//
// Seen answers only while it is complete: from the end of its start until
// the claims' feed may have lost a claim (a gap in the stream's sequence
// after a silence longer than holdFor, or a claim delivered older than
// lagFor); then it starts again.
type Seen struct {
	js     jetstream.JetStream
	names  bus.Names
	keys   KeyFeed
	window time.Duration
	bytes  int
	log    *zap.Logger
	// hold and lagLimit: holdFor and lagFor, but in tests.
	hold, lagLimit time.Duration

	mu       sync.Mutex
	f        *filter
	held     []claimSeen // claims younger than hold, oldest first
	complete bool
	caughtUp bool      // the feed has delivered every claim there was once
	lastSeq  uint64    // of the last claim delivered
	lastAt   time.Time // when it was delivered
	broken   chan struct{}
}

// KeyFeed is what Seen reads of ClickHouse at start: event_keys' rows.
type KeyFeed interface {
	EachKey(ctx context.Context, sinceNs int64, fn func(id string, tsNs int64)) error
}

type claimSeen struct {
	id string
	at time.Time
}

// FilterBytes is the memory of a writer copy's filter: false hits near 1
// in 1,000 keyed events up to ~200 keyed events/s sustained over a 24 h
// window; more make them likelier (each costs a lookup), never wrong.
const FilterBytes = 64 << 20

// holdFor is how old a claim is when its id joins the filter; lagFor, how
// old a claim may be when the feed delivers it.
const (
	holdFor = bus.PipelineWindow / 2
	lagFor  = bus.PipelineWindow * 3 / 4
)

var errFeedBroken = errors.New("the claims' feed may have lost claims")

// NewSeen returns a Seen over window with a filter of bytes at most; Run
// fills it.
func NewSeen(js jetstream.JetStream, names bus.Names, keys KeyFeed, window time.Duration, bytes int, log *zap.Logger) *Seen {
	return &Seen{js: js, names: names, keys: keys, window: window, bytes: bytes, log: log, hold: holdFor, lagLimit: lagFor}
}

// FirstAttempt reports whether the keyed event id certainly had no earlier
// attempt within the window. false means "not known": look it up.
func (s *Seen) FirstAttempt(id string) bool {
	if s == nil {
		return false
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete {
		return false
	}
	s.settle(now)
	return !s.f.has(id)
}

// Complete reports whether FirstAttempt can answer.
func (s *Seen) Complete() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.complete
}

// Run fills the filter until ctx ends, starting again after a failure or
// a break in the feed.
func (s *Seen) Run(ctx context.Context) error {
	if s == nil {
		<-ctx.Done()
		return nil
	}
	b := retry.Backoff{Initial: time.Second, Max: 30 * time.Second}
	for n := 1; ; n++ {
		err := s.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("keys seen: starting again; until then keyed events are looked up", zap.Error(err))
		if !retry.Sleep(ctx, b.Delay(n)) {
			return nil
		}
	}
}

// follow starts the filter afresh: the claims' feed first, then event_keys
// over the window, and keeps it until ctx ends or the feed breaks.
func (s *Seen) follow(ctx context.Context) error {
	s.mu.Lock()
	s.f, s.held, s.complete, s.caughtUp, s.lastSeq = newFilter(s.window, s.bytes), nil, false, false, 0
	s.broken = make(chan struct{})
	broken := s.broken
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.complete = false
		s.mu.Unlock()
	}()
	st, err := s.js.Stream(ctx, s.names.ClaimsStream)
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(s.claimed, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.log.Debug("claims' feed", zap.Error(err))
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	since := time.Now().Add(-s.window)
	err = s.keys.EachKey(ctx, since.UnixNano(), func(id string, tsNs int64) {
		s.mu.Lock()
		s.f.add(id, time.Unix(0, tsNs), time.Now())
		s.mu.Unlock()
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	select {
	case <-broken:
	default:
		s.complete = true
	}
	s.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-broken:
			return errFeedBroken
		case now := <-tick.C:
			s.mu.Lock()
			s.settle(now)
			s.mu.Unlock()
		}
	}
}

// claimed takes one claim from the feed.
func (s *Seen) claimed(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	id := strings.TrimPrefix(m.Subject(), s.names.ClaimSubject(""))
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := meta.Sequence.Stream
	lost := s.lastSeq != 0 && seq != s.lastSeq+1 && (seq <= s.lastSeq || now.Sub(s.lastAt) > s.hold)
	lagging := s.caughtUp && now.Sub(meta.Timestamp) > s.lagLimit
	if lost || lagging {
		s.breakFeed()
		return
	}
	if meta.NumPending == 0 {
		s.caughtUp = true
	}
	s.lastSeq, s.lastAt = seq, now
	s.held = append(s.held, claimSeen{id: id, at: meta.Timestamp})
}

// breakFeed marks the filter incomplete; follow starts again.
func (s *Seen) breakFeed() {
	s.complete = false
	select {
	case <-s.broken:
	default:
		close(s.broken)
	}
}

// settle moves the claims older than hold into the filter.
func (s *Seen) settle(now time.Time) {
	n := 0
	for ; n < len(s.held) && now.Sub(s.held[n].at) >= s.hold; n++ {
		s.f.add(s.held[n].id, s.held[n].at, now)
	}
	s.held = s.held[n:]
}
