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
// Every attempt that enters the pipeline first takes its request's claim
// in the claims stream (ingest-api/internal/claim; one claim per request,
// event.ClaimID), and a second attempt can take it only after the first's
// has expired, bus.PipelineWindow later. So an earlier attempt of an event
// checked now has a claim at least that old. Seen keeps a filter of every
// claim it received holdFor (half the pipeline window) ago or more, from
// the claims stream as it is written and, for the window before this copy
// started, of the event ids in event_keys. An event neither of whose ids
// (its own, its claim's) is in it has had no earlier attempt: its own claim
// is younger than holdFor. One in it (an earlier attempt, its own claim
// past hold, or a false hit of the filter) is looked up as before.
//
// Seen answers only while it is complete (from the end of its start until
// the claims' feed may have lost a claim: a gap in the stream's sequence
// where the claim before it is half the window old; then it starts again)
// and its feed was known caught up less than freshFor ago (the server has
// delivered every claim, and this copy has taken them in).
type Seen struct {
	js     jetstream.JetStream
	names  bus.Names
	keys   KeyFeed
	window time.Duration
	bytes  int
	log    *zap.Logger
	// hold and fresh: holdFor and freshFor, but in tests.
	hold, fresh time.Duration

	mu       sync.Mutex
	gen      uint64 // of the current run of follow: older callbacks are ignored
	f        *filter
	held     []claimSeen // claims received less than hold ago, oldest first
	complete bool
	// caughtUpAt is when the feed was last known to have delivered, and
	// this copy taken in, every claim in the stream.
	caughtUpAt time.Time
	lastSeq    uint64        // of the last claim taken in
	lastAt     time.Time     // when it was received
	lastLag    time.Duration // how late it came, beyond the quickest claim's
	minOffset  time.Duration // receipt minus claim time, the least seen
	broken     chan struct{}
}

// KeyFeed is what Seen reads of ClickHouse at start: event_keys' rows.
type KeyFeed interface {
	EachKey(ctx context.Context, sinceNs int64, fn func(id string, tsNs int64)) error
}

// claimSeen is a claim taken in: its id, and when it was received (this
// copy's clock, so that a clock apart from NATS's does not shift hold).
type claimSeen struct {
	id string
	at time.Time
}

// FilterBytes is the memory of a writer copy's filter: false hits near 1
// in 1,000 keyed events up to ~200 keyed events/s sustained over a 24 h
// window; more make them likelier (each costs a lookup), never wrong.
const FilterBytes = 64 << 20

// holdFor is how long after its receipt a claim's id joins the filter;
// freshFor, how long the feed may go without being known caught up before
// Seen stops answering.
const (
	holdFor  = bus.PipelineWindow / 2
	freshFor = bus.PipelineWindow / 4
)

var errFeedBroken = errors.New("the claims' feed may have lost claims")

// NewSeen returns a Seen over window with a filter of bytes at most; Run
// fills it.
func NewSeen(js jetstream.JetStream, names bus.Names, keys KeyFeed, window time.Duration, bytes int, log *zap.Logger) *Seen {
	return &Seen{js: js, names: names, keys: keys, window: window, bytes: bytes, log: log, hold: holdFor, fresh: freshFor}
}

// FirstAttempt reports whether the keyed event id, a single reading (its
// claim is its own id), certainly had no earlier attempt within the window.
// false means "not known": look it up.
func (s *Seen) FirstAttempt(id string) bool { return s.FirstAttempts([]string{id}, []string{id})[0] }

// FirstAttempts is FirstAttempt of each of ids, under one lock; claims[i]
// is the id ids[i]'s request claimed (event.ClaimID). An earlier attempt
// shows as its claim (the claims' feed) or its event id (event_keys).
func (s *Seen) FirstAttempts(ids, claims []string) []bool {
	first := make([]bool, len(ids))
	if s == nil {
		return first
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.complete || now.Sub(s.caughtUpAt) > s.fresh {
		return first
	}
	s.settle(now)
	for i, id := range ids {
		first[i] = !s.f.has(id) && (claims[i] == id || !s.f.has(claims[i]))
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
	return s.complete && time.Since(s.caughtUpAt) <= s.fresh
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
		start := time.Now()
		err := s.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > b.Max {
			n = 1 // it ran well a while: the back-off starts over
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
	s.gen++
	gen := s.gen
	s.f, s.held, s.complete, s.caughtUpAt, s.lastSeq, s.minOffset = newFilter(s.window, s.bytes), nil, false, time.Time{}, 0, 0
	s.broken = make(chan struct{})
	broken := s.broken
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.complete = false
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-broken:
			cancel() // the read of event_keys too
		case <-ctx.Done():
		}
	}()
	st, err := s.js.Stream(ctx, s.names.ClaimsStream)
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { s.claimed(gen, m) }, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
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
		if ctx.Err() != nil {
			return errFeedBroken
		}
		return err
	}
	s.mu.Lock()
	s.complete = true // answers once the feed is known caught up (check)
	s.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.check(ctx, cons)
		select {
		case <-ctx.Done():
			select {
			case <-broken:
				return errFeedBroken
			default:
				return ctx.Err()
			}
		case <-tick.C:
		}
	}
}

// check asks the server how far the feed is: when it has delivered every
// claim and this copy has taken them in, the feed is caught up as of the
// question.
func (s *Seen) check(ctx context.Context, cons jetstream.Consumer) {
	asked := time.Now()
	ictx, cancel := context.WithTimeout(ctx, s.fresh/2)
	info, err := cons.Info(ictx)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle(time.Now())
	if err == nil && info.NumPending == 0 && s.lastSeq >= info.Delivered.Stream {
		s.caughtUpAt = asked
	}
}

// claimed takes one claim from the feed of run gen.
func (s *Seen) claimed(gen uint64, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	id := strings.TrimPrefix(m.Subject(), s.names.ClaimSubject(""))
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return // a stopped run's
	}
	offset := now.Sub(meta.Timestamp)
	if s.lastSeq == 0 || offset < s.minOffset {
		s.minOffset = offset
	}
	seq := meta.Sequence.Stream
	// A gap in the sequence is claims deleted (released) or expired
	// before delivery; the latter is possible once the claim before it,
	// counting how late it came, is half the window old.
	if s.lastSeq != 0 && seq != s.lastSeq+1 && (seq <= s.lastSeq || now.Sub(s.lastAt)+s.lastLag > bus.PipelineWindow/2) {
		s.breakFeed()
		return
	}
	s.lastSeq, s.lastAt, s.lastLag = seq, now, offset-s.minOffset
	s.held = append(s.held, claimSeen{id: id, at: now})
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

// settle moves the claims received hold ago or more into the filter.
func (s *Seen) settle(now time.Time) {
	n := 0
	for ; n < len(s.held) && now.Sub(s.held[n].at) >= s.hold; n++ {
		s.f.add(s.held[n].id, s.held[n].at, now)
	}
	s.held = s.held[n:]
}
