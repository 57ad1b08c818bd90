// Package claimlog reads the claims log: the entries (one per keyed
// JetStream message, listing its requests' claim ids) that ingest-api
// copies write to the claims stream before a keyed message's events are
// stored, and their releases. Every reader applies the same rule to the
// same order (follower), so every copy of ingest-api and of writer-worker
// tells alike which entry holds a claim: ingest-api to send a retry to
// wait for its first attempt, writer-worker to store only the events of
// entries that hold (docs/guarantees.md).
package claimlog

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Log is one reading of the claims log, kept up by Run.
type Log struct {
	js    jetstream.JetStream
	names bus.Names
	log   *zap.Logger
	f     *follower
	tap   Tap // nil: none
	// reread ends the reading at once (a writer of entries found it
	// numbered again: Reread); reverify checks it at once (the consumer
	// made itself again).
	reread, reverify chan struct{}
	rereads          atomic.Uint64 // readings ended
}

// Tap is told what the reading reads, in the log's order, as it reads it:
// writer-worker's filter of keys seen (writer-worker/internal/idem) is fed
// by it, so that a copy reads the log once. Its methods are called from the
// reading's goroutines and must not block.
type Tap interface {
	// Restarted: a reading starts; it reads the log from the stream's
	// first message. What expired before it, it never reads.
	Restarted()
	// Read: a message stored at at (the server's clock) and received at
	// recv (this copy's): an entry's ids, or a release (release: the ids
	// it frees, or none). lost: messages before it may have expired
	// unread (see follower).
	Read(at, recv time.Time, ids []string, release, lost bool)
	// Checked: the reading was asked how far it is at asked, and answered
	// at answered with the server's time then; caught: it had read
	// everything the server had delivered, and nothing was left to
	// deliver.
	Checked(asked, answered, server time.Time, caught bool)
}

// Open returns a reading of the stream names.ClaimsStream (bus.EnsureStreams
// creates it) that keeps what the entries tagged under own hold ("": every
// entry) for the window, telling tap (nil: none) what it reads; Run reads.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names, own string, tap Tap, log *zap.Logger) (*Log, error) {
	st, err := js.Stream(ctx, names.ClaimsStream)
	if err != nil {
		return nil, fmt.Errorf("claims stream %s: %w", names.ClaimsStream, err)
	}
	// The rule's window is the stream's duplicate window (an entry
	// written again within it is stored once: bus.PipelineWindow); the
	// stream keeps entries MaxAge, longer (bus.ClaimsKept), so that a
	// reading that starts can tell what the entries of the last
	// MaxAge - window hold. A stream made before 2026-11-29 keeps them one
	// window: its readings tell only what is written after they start.
	cfg := st.CachedInfo().Config
	window, kept := cfg.Duplicates, cfg.MaxAge
	if kept <= 0 {
		kept = bus.PipelineWindow
	}
	if window <= 0 || window > kept {
		window = kept
	}
	return &Log{js: js, names: names, log: log, f: newFollower(window, kept-window, own), tap: tap,
		reread: make(chan struct{}, 1), reverify: make(chan struct{}, 1)}, nil
}

// CaughtUp reports whether the current reading has read the log up to
// where it stood when the reading started (after a start, and after each
// reading again): an entry it has not read was stored since, or never.
func (l *Log) CaughtUp() bool { return l.f.isCaught() }

// Wait returns once the message seq of the claims stream has been read, or
// ctx ends: the reading that read it.
func (l *Log) Wait(ctx context.Context, seq uint64) (uint64, error) { return l.f.wait(ctx, seq) }

// Decision is what the entry tagged tag holds, once read.
func (l *Log) Decision(tag string) (Entry, bool) { return l.f.decision(tag) }

// WaitDecision is what the entry tagged tag holds, once a reading has read
// it, or ctx's error.
func (l *Log) WaitDecision(ctx context.Context, tag string) (Entry, error) {
	return l.f.waitDecision(ctx, tag)
}

// Reread ends the reading gen, if it is the current one, and reads the log
// again from its start: its sequence went back past an entry it read.
func (l *Log) Reread(gen uint64) {
	if l.f.invalidate(gen) {
		select {
		case l.reread <- struct{}{}:
		default:
		}
	}
}

// Rereads is how many readings ended (each followed by a new one).
func (l *Log) Rereads() uint64 { return l.rereads.Load() }

// Free writes the release of ids from the entry tagged tag: ids it does
// not hold, in this reading or another's (a reading that cannot tell would
// take them for claims, and one that judges them held by it would keep
// them, for the window). It is written on a context of its own (ctx may be
// nearly spent), within releaseWait, under a message id of its own, so that
// writing it again is stored once. No ids: nothing to write (a release
// listing none releases the whole entry).
func (l *Log) Free(ctx context.Context, tag string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	return retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}.Do(ctx, func(ctx context.Context) error {
		return l.publishRelease(ctx, l.names.ClaimFreeSubject(tag), "free-"+tag, ids)
	}, nil)
}

// releaseWait bounds the release of the ids an entry does not hold.
const releaseWait = 2 * time.Second

// ReleaseEntry writes the release of the whole entry tagged tag: its ids
// are free for the entries after it (its events certainly never entered
// the events stream).
func (l *Log) ReleaseEntry(ctx context.Context, tag string) error {
	return l.publishRelease(ctx, l.names.ClaimReleaseSubject(tag), "release-"+tag, nil)
}

// publishRelease writes a release on subject, under the message id msgID
// (so that writing it again is stored once), listing ids (none: the whole
// entry).
func (l *Log) publishRelease(ctx context.Context, subject, msgID string, ids []string) error {
	msg := &nats.Msg{Subject: subject, Data: []byte(strings.Join(ids, "\n")), Header: nats.Header{nats.MsgIdHdr: {msgID}}}
	if _, err := l.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("release claims: %w", err)
	}
	return nil
}
