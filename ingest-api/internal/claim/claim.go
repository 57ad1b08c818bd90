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
// Until 2026-11-29 each request took a claim of its own, a message on
// <prefix>.claims.<id>, stored only if that subject held none: one stored
// message per keyed request, and its cost in NATS (docs/performance.md).
// The log reads such claims as entries of one id that hold, so a copy of
// this release respects the claims of a copy of the one before during a
// rolling upgrade. Those copies release a claim by deleting it: a reading
// that comes to the gap reads it as holding nothing, one that read the
// claim before keeps it for the window (its retries wait, answered 503).
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
)

// ErrTaken means another attempt with the same id holds the claim.
var ErrTaken = errors.New("an earlier attempt with this Idempotency-Key is in the pipeline")

// Claims writes the claims log and reads it (Run).
type Claims struct {
	*claimlog.Log
	js    jetstream.JetStream
	names bus.Names
	log   *zap.Logger
	own   string // the prefix of this copy's tags
	next  atomic.Uint64
}

// Open returns Claims on the stream names.ClaimsStream, which
// bus.EnsureStreams creates. Run reads the log.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names, log *zap.Logger) (*Claims, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	own := hex.EncodeToString(b[:]) + "-"
	l, err := claimlog.Open(ctx, js, names, own, nil, log)
	if err != nil {
		return nil, err
	}
	return &Claims{Log: l, js: js, names: names, log: log, own: own}, nil
}

// Tag is a new tag for an entry, unique to this copy's life.
func (c *Claims) Tag() string { return c.own + strconv.FormatUint(c.next.Add(1), 36) }

// Claim is an entry written: its tag.
type Claim struct{ tag string }

// Of is the entry tagged tag, written (Write), to release if its events
// never enter the events stream.
func Of(tag string) Claim { return Claim{tag: tag} }

// TakeAll writes one entry tagged tag (this copy's: Tag) listing ids, and
// returns, once this copy has read it, whether it holds each: held[i] for
// ids[i]. Writing it again under the same tag (its answer lost) is
// answered with the entry stored first, so TakeAll also settles an entry
// whose answer was lost. An error means not known: the entry may be
// stored.
//
// The ids the entry does not hold are released at once: one unknown to
// this copy (an earlier entry, from before this copy's reading, may hold
// it) may hold for another copy, and one blocked may look unknown to a
// copy that cannot tell; this copy publishes no events for either.
func (c *Claims) TakeAll(ctx context.Context, ids []string, tag string) (Claim, []bool, error) {
	fut, err := c.Write(ids, tag)
	if err != nil {
		return Claim{}, nil, err
	}
	return c.Decide(ctx, fut, ids, tag, true)
}

// Write sends the entry tagged tag (this copy's: Tag) listing ids, without
// waiting for its answer: Decide waits.
func (c *Claims) Write(ids []string, tag string) (jetstream.PubAckFuture, error) {
	if !strings.HasPrefix(tag, c.own) {
		return nil, fmt.Errorf("claim: the tag %s is not this copy's", tag)
	}
	msg := &nats.Msg{Subject: c.names.ClaimLogSubject(tag), Data: []byte(strings.Join(ids, "\n")),
		Header: nats.Header{nats.MsgIdHdr: {tag}}}
	fut, err := c.js.PublishMsgAsync(msg)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return fut, nil
}

// Decide waits for the answer to the entry fut (Write's, of ids, tagged
// tag) and for this copy's reading of it, and returns whether it holds each
// of ids. With free it writes the release of those it does not hold (see
// TakeAll); when the writers decide what is stored (the events went out
// with the entry), they write it. An error means not known: the entry may
// be stored.
func (c *Claims) Decide(ctx context.Context, fut jetstream.PubAckFuture, ids []string, tag string, free bool) (Claim, []bool, error) {
	var ack *jetstream.PubAck
	select {
	case ack = <-fut.Ok():
	case err := <-fut.Err():
		return Claim{}, nil, fmt.Errorf("claim: %w", err)
	case <-ctx.Done():
		return Claim{}, nil, fmt.Errorf("claim: %w", ctx.Err())
	}
	gen, err := c.Wait(ctx, ack.Sequence)
	if err != nil {
		return Claim{}, nil, fmt.Errorf("claim: the claims log not read: %w", err)
	}
	e, ok := c.Decision(tag)
	switch {
	case ok && len(e.Status) == len(ids):
	case ack.Duplicate:
		// Written before, and gone (deleted, expired) before this copy
		// read it: what it held is not known.
		return Claim{}, nil, fmt.Errorf("claim: the entry tagged %s was not read", tag)
	default:
		// The reading passed the entry's sequence without reading it
		// (the message there is ours): the stream numbered its messages
		// again (it lost its last ones, or was made anew). Read it
		// again. When the message there is another, the entry was lost
		// with the stream's last messages, and the reading read what
		// came after.
		if c.isOurs(ctx, ack.Sequence, tag) {
			c.Reread(gen)
		}
		return Claim{}, nil, fmt.Errorf("claim: the entry tagged %s not read: %w", tag, claimlog.ErrRenumbered)
	}
	got := make([]bool, len(e.Status))
	all := true
	for i, s := range e.Status {
		got[i] = s == claimlog.Held
		all = all && got[i]
	}
	if !all && free {
		c.free(ctx, tag, notHeld(ids, got))
	}
	return Claim{tag: tag}, got, nil
}

// notHeld is the ids the entry does not hold: got[i] is false, and no
// other request of the entry holds the same id.
func notHeld(ids []string, got []bool) []string {
	holds := map[string]bool{}
	for i, id := range ids {
		if got[i] {
			holds[id] = true
		}
	}
	var free []string
	for i, id := range ids {
		if !got[i] && !holds[id] {
			free = append(free, id)
		}
	}
	return free
}

// isOurs reports whether the claims stream's message seq is the entry
// tagged tag.
func (c *Claims) isOurs(ctx context.Context, seq uint64, tag string) bool {
	st, err := c.js.Stream(ctx, c.names.ClaimsStream)
	if err != nil {
		return false
	}
	m, err := st.GetMsg(ctx, seq)
	return err == nil && m.Header.Get(nats.MsgIdHdr) == tag
}

// free writes the release of ids from the entry tagged tag: the ids it
// does not hold (TakeAll), on a context of its own (ctx may be nearly
// spent by the wait for the reading). One not written leaves them, for the
// copies that cannot tell and for those that judge them held by the entry,
// claimed for the window: their retries wait for an outcome that will not
// come.
func (c *Claims) free(ctx context.Context, tag string, ids []string) {
	if err := c.Free(ctx, tag, ids); err != nil {
		c.log.Warn("claims this copy could not tell not released: retries wait for the pipeline window", zap.Int("requests", len(ids)), zap.Error(err))
	}
}

// Release writes the release of cl: its ids are free for the entries after
// it. A release that cannot be written leaves the claims for the window:
// until then, retries wait for an outcome that will not come and are
// answered 503.
func (c *Claims) Release(ctx context.Context, cl Claim) error {
	if cl.tag == "" {
		return nil
	}
	return c.ReleaseEntry(ctx, cl.tag)
}
