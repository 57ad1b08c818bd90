package claimlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/retry"
)

// Ready is closed once the log has been read to where it stood at the
// first start of Run.
func (l *Log) Ready() <-chan struct{} { return l.f.ready }

// Run follows the log until ctx ends, reading it again after a failure.
func (l *Log) Run(ctx context.Context) error {
	retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.Loop(ctx, l.follow, func(err error) {
		l.rereads.Add(1)
		l.log.Warn("claims log: reading it again from its start; until then keyed requests and events wait", zap.Error(err))
	})
	return nil
}

// ErrRenumbered: the log's sequence went back, or the stream was made
// anew (see verify).
var ErrRenumbered = errors.New("the claims log was numbered again")

// verifyEvery is how often a reading checks that the log was not numbered
// again behind it.
const verifyEvery = time.Second

// verifyWait bounds a check's questions to the server.
const verifyWait = 5 * time.Second

// follow reads the log from its start (the stream holds the window) until
// ctx ends or the reading fails.
func (l *Log) follow(ctx context.Context) error {
	st, err := l.js.Stream(ctx, l.names.ClaimsStream)
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: 10 * time.Second})
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
	var gen uint64
	started := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		<-started
		recv := time.Now()
		meta, err := m.Metadata()
		if err != nil {
			l.f.invalidate(gen)
			fail(fmt.Errorf("a message of the claims log unread: %w", err))
			return
		}
		seq := meta.Sequence.Stream
		next, lastAt, ok := l.f.next(gen)
		if !ok {
			return // another reading's
		}
		var until time.Time
		if seq > next {
			if until, err = l.unknownAfterGap(ctx, st, lastAt); err != nil {
				l.f.invalidate(gen)
				fail(fmt.Errorf("a gap in the claims log not told: %w", err))
				return
			}
		}
		ids, tag, release := l.names.ClaimEntry(m.Subject(), m.Data())
		if l.tap != nil {
			// Told first: once the reading counts a message read, its tap
			// has it (a message of a log numbered again only costs it a
			// lookup).
			l.tap.Read(meta.Timestamp, recv, ids, release, !until.IsZero())
		}
		if !l.f.read(gen, seq, meta.Timestamp, ids, tag, release, until) {
			fail(ErrRenumbered)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// The ordered consumer makes itself again after a lost consumer,
		// heartbeat or connection, from the message after the last one it
		// handed over (what it had buffered may have expired since: a gap,
		// which read is told of); a closed connection ends it. Whether the
		// stream was numbered again is checked at once when it says so.
		if errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionClosed) {
			fail(err)
		}
		select {
		case l.reverify <- struct{}{}:
		default:
		}
		l.log.Debug("claims log", zap.Error(err))
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	// The consumer exists: the stream holds for it every entry stored a
	// window before the server's time now, from its first sequence now.
	info, err := st.Info(ctx)
	if err != nil {
		close(started)
		return err
	}
	gen = l.f.restart(info.TimeStamp, info.State.FirstSeq, info.State.LastSeq)
	if l.tap != nil {
		l.tap.Restarted()
	}
	close(started)
	defer l.f.invalidate(gen)
	created := info.Created
	check := time.NewTimer(catchUpEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-l.reread:
			if !l.f.current(gen) {
				return ErrRenumbered // TakeAll ended this reading
			}
			continue // an earlier reading's
		case <-check.C:
		case <-l.reverify:
		}
		if err := l.verify(ctx, gen, st, cons, created); err != nil {
			return err
		}
		check.Reset(verifyEvery)
		if !l.f.isCaught() {
			check.Reset(catchUpEvery)
		}
	}
}

// catchUpEvery is how often a reading asks whether it caught up.
const catchUpEvery = 100 * time.Millisecond

// skewMargin bounds how far the NATS servers' clocks (and their expiry
// timers) may differ.
const skewMargin = 10 * time.Second

// unknownAfterGap is, for messages missing between one read, stored at
// lastAt (zero: none read yet), and the next one read, until when claims
// are unknown: zero when they cannot have expired (see follower). The
// stream's time is asked again for up to verifyWait.
func (l *Log) unknownAfterGap(ctx context.Context, st jetstream.Stream, lastAt time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, verifyWait)
	defer cancel()
	var now time.Time
	err := retry.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}.Do(ctx, func(ctx context.Context) error {
		info, err := st.Info(ctx)
		if err == nil {
			now = info.TimeStamp
		}
		return err
	}, nil)
	if err != nil {
		return time.Time{}, err
	}
	if !lastAt.IsZero() && lastAt.Add(l.f.window+l.f.lookback).After(now.Add(2*skewMargin)) {
		return time.Time{}, nil // younger than the MaxAge by more than the clocks may differ
	}
	return now.Add(skewMargin - l.f.lookback), nil
}

// verify checks that the stream read is still the one the reading gen
// started on, numbered as read: not made anew, its last sequence not
// behind the reading's, the message at the reading's last sequence the one
// read (a stream that lost its last messages to a power loss numbers new
// ones again; the ordered consumer would resume after its last and skip
// them). Until the reading is caught up (with a tap, at each check) it
// also asks how far the consumer is, and marks the reading caught up when
// it has read everything delivered and nothing is left to deliver (the
// stream's last sequence at its start may name a message gone).
func (l *Log) verify(ctx context.Context, gen uint64, st jetstream.Stream, cons jetstream.Consumer, created time.Time) error {
	vctx, cancel := context.WithTimeout(ctx, verifyWait)
	defer cancel()
	if l.tap != nil || !l.f.isCaught() {
		asked := time.Now()
		if ci, err := cons.Info(vctx); err == nil {
			caught := ci.NumPending == 0 && l.f.caughtUp(gen, ci.Delivered.Stream)
			if l.tap != nil {
				l.tap.Checked(asked, time.Now(), ci.TimeStamp, caught)
			}
		}
	}
	seq, at := l.f.last()
	info, err := st.Info(vctx)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w: %w", ErrRenumbered, err)
	case err != nil:
		return nil // not known now; asked again
	case !info.Created.Equal(created) || info.State.LastSeq < seq:
		return ErrRenumbered
	case at.IsZero() || seq < info.State.FirstSeq:
		return nil // nothing read yet, or expired since
	}
	m, err := st.GetMsg(vctx, seq)
	if err != nil {
		return nil // deleted, or not known now
	}
	if m.Time.UnixNano() != at.UnixNano() {
		return ErrRenumbered
	}
	return nil
}
