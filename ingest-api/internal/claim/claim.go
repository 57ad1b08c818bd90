// Package claim keeps one attempt of each keyed request in the pipeline at a
// time. Before a keyed message's events are published, its requests' claims
// (one per request, on an id derived from its key: event.ClaimID) are
// written as one entry of the claims log: a message on
// <prefix>.claims.log-<tag> in the claims stream listing the ids. Every
// ingest-api copy follows the log in the stream's order, and an id belongs
// to an entry when no other entry that lists it, not released, was stored
// less than the pipeline window before it: a rule every copy applies alike,
// whichever copy wrote the entry. A request whose claim another entry holds
// (a retry while its first attempt is in the pipeline) waits for the first
// attempt's outcomes instead of entering the pipeline a second time.
//
// An entry lasts the pipeline window (bus.PipelineWindow, the stream's
// MaxAge; after it, writer-worker's record of outcomes answers a retry). One
// whose events never entered the events stream is released at once by a
// release entry, so that the device's retry is processed as a new request.
//
// Until 2026-11-28 each request took a claim of its own, a message on
// <prefix>.claims.<id>, stored only if that subject held none: one stored
// message per keyed request, and its cost in NATS (docs/performance.md).
// The log reads such claims as entries of one id, so a copy of this
// release respects the claims of a copy of the one before.
package claim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
)

// ErrTaken means another attempt with the same id holds the claim.
var ErrTaken = errors.New("an earlier attempt with this Idempotency-Key is in the pipeline")

// Claims writes the claims log and follows it (Run).
type Claims struct {
	js    jetstream.JetStream
	names bus.Names
	log   *zap.Logger
	f     *follower
	own   string // the prefix of this copy's tags
	next  atomic.Uint64
}

// Open returns Claims on the stream names.ClaimsStream, which
// bus.EnsureStreams creates. Run follows the log.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names, log *zap.Logger) (*Claims, error) {
	st, err := js.Stream(ctx, names.ClaimsStream)
	if err != nil {
		return nil, fmt.Errorf("claims stream %s: %w", names.ClaimsStream, err)
	}
	window := st.CachedInfo().Config.MaxAge
	if window <= 0 {
		window = bus.PipelineWindow
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	own := hex.EncodeToString(b[:]) + "-"
	return &Claims{js: js, names: names, log: log, f: newFollower(window, own), own: own}, nil
}

// Tag is a new tag for an entry, unique to this copy's life.
func (c *Claims) Tag() string { return c.own + strconv.FormatUint(c.next.Add(1), 36) }

// Claim is an entry written: its tag.
type Claim struct{ tag string }

// TakeAll writes one entry tagged tag listing ids, and returns, once this
// copy has read it, whether it holds each: held[i] for ids[i]. Writing it
// again under the same tag (its answer lost) is answered with the entry
// stored first, so TakeAll also settles an entry whose answer was lost.
// An error means not known: the entry may be stored.
func (c *Claims) TakeAll(ctx context.Context, ids []string, tag string) (Claim, []bool, error) {
	msg := &nats.Msg{Subject: c.names.ClaimLogSubject(tag), Data: []byte(strings.Join(ids, "\n")),
		Header: nats.Header{nats.MsgIdHdr: {tag}}}
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		return Claim{}, nil, fmt.Errorf("claim: %w", err)
	}
	if err := c.f.wait(ctx, ack.Sequence); err != nil {
		return Claim{}, nil, fmt.Errorf("claim: the claims log not read: %w", err)
	}
	held, ok := c.f.decision(tag)
	if !ok || len(held) != len(ids) {
		// Stored under this tag before, with other ids: a tag is
		// never reused, so this is not ours to hold.
		return Claim{}, nil, fmt.Errorf("claim: the entry tagged %s is not this copy's", tag)
	}
	return Claim{tag: tag}, held, nil
}

// Release writes the release of cl: its ids are free for the entries after
// it. A release that cannot be written leaves the claims for the window:
// until then, retries wait for an outcome that will not come and are
// answered 503.
func (c *Claims) Release(ctx context.Context, cl Claim) error {
	if cl.tag == "" {
		return nil
	}
	msg := &nats.Msg{Subject: c.names.ClaimReleaseSubject(cl.tag), Header: nats.Header{nats.MsgIdHdr: {"release-" + cl.tag}}}
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("release claims: %w", err)
	}
	return nil
}

// Ready is closed once the log has been read to where it stood at the
// first start of Run.
func (c *Claims) Ready() <-chan struct{} { return c.f.ready }

// Run follows the log until ctx ends, starting again after a failure.
func (c *Claims) Run(ctx context.Context) error {
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("claims log: reading it again from its start", zap.Error(err))
		if errors.Is(err, errLost) {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// errLost: the reading lost messages of the log (see follower.read).
var errLost = errors.New("messages of the claims log lost before they were read")

// follow reads the log from its start (the stream holds the window) until
// ctx ends or the feed fails.
func (c *Claims) follow(ctx context.Context) error {
	st, err := c.js.Stream(ctx, c.names.ClaimsStream)
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	fail := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	started := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		<-started
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		ids, tag, release := c.names.ClaimEntry(m.Subject(), m.Data())
		if !c.f.read(meta.Sequence.Stream, meta.Timestamp, ids, tag, release) {
			fail(errLost)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// The ordered consumer makes itself again after a lost consumer,
		// heartbeat or connection, from the message after the last read
		// (read reports what it finds missing then); a closed connection
		// ends it.
		if errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionClosed) {
			fail(err)
		}
		c.log.Debug("claims log", zap.Error(err))
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	// The consumer exists: the stream holds for it every entry stored a
	// window before the server's time now.
	info, err := st.Info(ctx)
	if err != nil {
		close(started)
		return err
	}
	c.f.restart(info.TimeStamp, info.State.LastSeq)
	close(started)
	// The stream's last sequence may name a message gone (expired,
	// deleted): the reading is also caught up when the consumer has
	// nothing left to deliver.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for !c.f.isReady() {
			select {
			case <-lctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if ci, err := cons.Info(lctx); err == nil && ci.NumPending == 0 {
				c.f.caughtUp()
			}
		}
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-failed:
		return err
	}
}
