package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/envflag"
)

// ConsumerConfig is what a worker tunes of its durable consumer.
type ConsumerConfig struct {
	// MaxAckPending is how many messages the server lets this consumer
	// hold unacknowledged (all copies together).
	MaxAckPending int
	// PullBatch is how many messages one pull request asks for.
	PullBatch int
	// AckWait is how long a delivered message waits for its ack before it
	// is delivered again: the time a crashed copy's messages are stuck.
	AckWait time.Duration
}

// RegisterAckWait adds ACK_WAIT with a worker's default; the rest of c
// is the worker's own.
func (c *ConsumerConfig) RegisterAckWait(s *envflag.Set, def ConsumerConfig) {
	*c = def
	s.Duration(&c.AckWait, "ack-wait", def.AckWait, "redelivery delay of an unacknowledged message (a crashed copy's messages wait this long)")
}

// Validate reports the first thing wrong, in one line.
func (c ConsumerConfig) Validate() error {
	if c.AckWait < time.Second {
		return errors.New("ACK_WAIT must be at least 1s")
	}
	return nil
}

// Durable describes a worker's shared durable consumer. Every copy of a
// worker binds to the same one, so that each event goes to one copy.
type Durable struct {
	Stream, Name string
	ConsumerConfig
	// Consuming, when set, is called once this copy pulls from the
	// consumer (readiness: a worker copy is ready once it takes work).
	Consuming func()
}

// ConsumeBatches creates or updates the durable consumer and, until ctx
// ends, adds each message, in delivery order, to a batcher (pkg/batcher,
// cfg) that hands them to flush. Then it drains: no new pulls, the messages
// already buffered still join the batcher, which hands over what it holds,
// and ConsumeBatches returns when every batch is released. The batcher holds
// at most MaxAckPending messages: the server never has more outstanding.
//
// A consumer found ahead of its stream (aheadCheck) is created again from
// the first message the stream holds, and consumed on.
func ConsumeBatches(ctx context.Context, js jetstream.JetStream, d Durable, log *zap.Logger, cfg batcher.Config, flush batcher.Flush[jetstream.Msg]) error {
	create := func() (jetstream.Consumer, error) {
		cons, err := js.CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{
			Durable:       d.Name,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       d.AckWait,
			MaxAckPending: d.MaxAckPending,
			MaxDeliver:    -1,
		})
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", d.Name, err)
		}
		return cons, nil
	}
	cons, err := create()
	if err != nil {
		return err
	}
	b := batcher.New(cfg, nil, flush)
	bctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	add := func(m jetstream.Msg) {
		if err := b.Add(m); err != nil {
			// Not reached (the batcher is unbounded and stops after
			// the consumer): left unacked, the message comes again.
			log.Error("message not batched", zap.String("consumer", d.Name), zap.Error(err))
		}
	}
	for first := true; ; first = false {
		// Short-lived pull requests: one sent while the consumer has no
		// leader (a NATS node just failed) is lost, and this copy would
		// idle until the request expired. The default of 30 s is too long
		// to be idle.
		cc, err := cons.Consume(add,
			jetstream.PullMaxMessages(d.PullBatch),
			jetstream.PullExpiry(5*time.Second),
			jetstream.PullHeartbeat(2*time.Second),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				log.Debug("consume", zap.String("consumer", d.Name), zap.Error(err))
			}))
		if err != nil {
			stop()
			<-done
			return fmt.Errorf("consume %s: %w", d.Name, err)
		}
		if first && d.Consuming != nil {
			d.Consuming()
		}
		select {
		case <-ctx.Done():
			cc.Drain()
			<-cc.Closed()
			stop()
			return <-done
		case <-aheadOf(ctx, js, d, cons):
		}
		// The stream lost messages it had acknowledged (every NATS node
		// lost power before syncing), and the consumer's state survived
		// ahead of it: it would skip the messages stored until the stream
		// caught up. Acks of what this copy holds fail; those messages come
		// again, and the pipeline's checks catch what was stored.
		cc.Stop()
		<-cc.Closed()
		log.Warn("consumer ahead of its stream: created again from the stream's first message", zap.String("consumer", d.Name))
		for {
			if err = js.DeleteConsumer(ctx, d.Stream, d.Name); err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
				if cons, err = create(); err == nil {
					break
				}
			}
			log.Warn("consumer not created again, retrying", zap.String("consumer", d.Name), zap.Error(err))
			select {
			case <-ctx.Done():
				stop()
				return <-done
			case <-time.After(time.Second):
			}
		}
	}
}

// aheadEvery is how often a consumer is compared with its stream.
const aheadEvery = 5 * time.Second

// aheadOf closes its channel once cons is found ahead of its stream: its
// ack floor past the stream's last sequence, which no consumer reaches
// unless the stream lost messages it had acknowledged. It stops with ctx.
func aheadOf(ctx context.Context, js jetstream.JetStream, d Durable, cons jetstream.Consumer) <-chan struct{} {
	found := make(chan struct{})
	go func() {
		t := time.NewTicker(aheadEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if aheadCheck(ctx, js, d.Stream, cons) {
				close(found)
				return
			}
		}
	}()
	return found
}

// aheadCheck reports whether cons has acked past its stream's last
// sequence (false when either cannot be read).
func aheadCheck(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer) bool {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ci, err := cons.Info(qctx)
	if err != nil {
		return false
	}
	st, err := js.Stream(qctx, stream)
	if err != nil {
		return false
	}
	return ci.AckFloor.Stream > st.CachedInfo().State.LastSeq
}
