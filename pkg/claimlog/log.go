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
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
)

// Log is one reading of the claims log, kept up by Run.
type Log struct {
	js    jetstream.JetStream
	names bus.Names
	log   *zap.Logger
	f     *follower
	// reread ends the reading at once (a writer of entries found it
	// numbered again: Reread); reverify checks it at once (the consumer
	// made itself again).
	reread, reverify chan struct{}
	rereads          atomic.Uint64 // readings ended
}

// Open returns a reading of the stream names.ClaimsStream (bus.EnsureStreams
// creates it) that keeps what the entries tagged under own hold ("": every
// entry) for the window; Run reads.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names, own string, log *zap.Logger) (*Log, error) {
	st, err := js.Stream(ctx, names.ClaimsStream)
	if err != nil {
		return nil, fmt.Errorf("claims stream %s: %w", names.ClaimsStream, err)
	}
	window := st.CachedInfo().Config.MaxAge
	if window <= 0 {
		window = bus.PipelineWindow
	}
	return &Log{js: js, names: names, log: log, f: newFollower(window, own),
		reread: make(chan struct{}, 1), reverify: make(chan struct{}, 1)}, nil
}

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
