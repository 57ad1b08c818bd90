package claim

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
func (c *Claims) Ready() <-chan struct{} { return c.f.ready }

// Run follows the log until ctx ends, reading it again after a failure.
func (c *Claims) Run(ctx context.Context) error {
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for n := 1; ; n++ {
		start := time.Now()
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > b.Max {
			n = 1 // it ran well a while: the back-off starts over
		}
		c.rereads.Add(1)
		c.log.Warn("claims log: reading it again from its start; until then keyed requests wait", zap.Error(err))
		if !retry.Sleep(ctx, b.Delay(n)) {
			return nil
		}
	}
}

// errRenumbered: the log's sequence went back, or the stream was made
// anew (see verify).
var errRenumbered = errors.New("the claims log was numbered again")

// verifyEvery is how often a reading checks that the log was not numbered
// again behind it.
const verifyEvery = time.Second

// verifyWait bounds a check's questions to the server.
const verifyWait = 5 * time.Second

// follow reads the log from its start (the stream holds the window) until
// ctx ends or the reading fails.
func (c *Claims) follow(ctx context.Context) error {
	st, err := c.js.Stream(ctx, c.names.ClaimsStream)
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
		meta, err := m.Metadata()
		if err != nil {
			c.f.invalidate(gen)
			fail(fmt.Errorf("a message of the claims log unread: %w", err))
			return
		}
		ids, tag, release := c.names.ClaimEntry(m.Subject(), m.Data())
		if !c.f.read(gen, meta.Sequence.Stream, meta.Timestamp, ids, tag, release) {
			fail(errRenumbered)
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// The ordered consumer makes itself again after a lost consumer,
		// heartbeat or connection, from the message after the last read;
		// a closed connection ends it. Whether the stream was numbered
		// again meanwhile is checked at once.
		if errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionClosed) {
			fail(err)
		}
		select {
		case c.reverify <- struct{}{}:
		default:
		}
		c.log.Debug("claims log", zap.Error(err))
	}))
	if err != nil {
		return err
	}
	defer cc.Stop()
	info, err := st.Info(ctx)
	if err != nil {
		close(started)
		return err
	}
	gen = c.f.restart()
	close(started)
	defer c.f.invalidate(gen)
	created := info.Created
	check := time.NewTimer(catchUpEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-c.reread:
			if !c.f.current(gen) {
				return errRenumbered // TakeAll ended this reading
			}
			continue // an earlier reading's
		case <-check.C:
		case <-c.reverify:
		}
		caught, err := c.verify(ctx, gen, st, cons, created)
		if err != nil {
			return err
		}
		check.Reset(catchUpEvery)
		if caught {
			check.Reset(verifyEvery)
		}
	}
}

// catchUpEvery is how often a reading asks whether it caught up.
const catchUpEvery = 100 * time.Millisecond

// errBehind: the reading fell behind by half the window, and messages may
// expire before it reads them.
var errBehind = errors.New("the reading of the claims log fell behind")

// verify checks the reading gen. Until it has caught up, it asks whether
// the consumer has anything left to deliver: when not, the reading caught
// up as of the stream's time then. Once caught up, it checks that the
// stream is still the one the reading started on, numbered as read: not
// made anew, its last sequence not behind the reading's, the message at
// the reading's last sequence the one read (a stream that lost its last
// messages to a power loss numbers new ones again; the ordered consumer
// would resume after its last and skip them); and that the reading is not
// half a window behind the stream (what it has not read yet may expire).
func (c *Claims) verify(ctx context.Context, gen uint64, st jetstream.Stream, cons jetstream.Consumer, created time.Time) (caught bool, err error) {
	vctx, cancel := context.WithTimeout(ctx, verifyWait)
	defer cancel()
	pending := -1
	if !c.f.isCaught(gen) {
		ci, err := cons.Info(vctx)
		if err != nil {
			return false, nil // not known now; asked again
		}
		pending = int(min(ci.NumPending, 1))
	}
	seq, at := c.f.last()
	info, err := st.Info(vctx)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, fmt.Errorf("%w: %w", errRenumbered, err)
	case err != nil:
		return false, nil
	case !info.Created.Equal(created) || info.State.LastSeq < seq:
		return false, errRenumbered
	case pending == 0:
		// Asked after the consumer: its time is no earlier than when
		// nothing was left.
		c.f.caughtUp(gen, info.TimeStamp)
		return true, nil
	case pending > 0:
		return false, nil
	case c.f.behind(gen, info.TimeStamp) > c.f.window/2 && info.State.LastSeq > seq:
		return true, errBehind
	case seq == 0 || seq < info.State.FirstSeq:
		return true, nil
	}
	m, err := st.GetMsg(vctx, seq)
	if err != nil {
		return true, nil // deleted, or not known now
	}
	if m.Time.UnixNano() != at.UnixNano() {
		return true, errRenumbered
	}
	return true, nil
}
