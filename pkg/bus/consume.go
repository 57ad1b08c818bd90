package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Durable describes a worker's shared durable consumer. Every copy of a
// worker binds to the same one, so that each event goes to one copy.
type Durable struct {
	Stream, Name  string
	AckWait       time.Duration
	MaxAckPending int
	PullBatch     int
	// Consuming, when set, is called once this copy pulls from the
	// consumer (readiness: a worker copy is ready once it takes work).
	Consuming func()
}

// ConsumeUntil creates or updates the durable consumer, hands each message to
// handle (one at a time, in delivery order) until ctx ends, then drains: no
// new pulls, the messages already buffered still go to handle, and it
// returns once the last handle call returned.
func ConsumeUntil(ctx context.Context, js jetstream.JetStream, d Durable, log *zap.Logger, handle func(jetstream.Msg)) error {
	cons, err := js.CreateOrUpdateConsumer(ctx, d.Stream, jetstream.ConsumerConfig{
		Durable:       d.Name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       d.AckWait,
		MaxAckPending: d.MaxAckPending,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", d.Name, err)
	}
	// Short-lived pull requests: one sent while the consumer has no leader
	// (a NATS node just failed) is lost, and this copy would idle until
	// the request expired. The default of 30 s is too long to be idle.
	cc, err := cons.Consume(handle,
		jetstream.PullMaxMessages(d.PullBatch),
		jetstream.PullExpiry(5*time.Second),
		jetstream.PullHeartbeat(2*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.Debug("consume", zap.String("consumer", d.Name), zap.Error(err))
		}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", d.Name, err)
	}
	if d.Consuming != nil {
		d.Consuming()
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// ConsumeInto is ConsumeUntil for a worker that batches: messages go into a
// channel that holds MaxAckPending of them (the server never has more
// outstanding, so delivery never blocks), and work reads it in its own
// goroutine until the channel is closed and drained after ctx ends.
func ConsumeInto(ctx context.Context, js jetstream.JetStream, d Durable, log *zap.Logger, work func(<-chan jetstream.Msg)) error {
	in := make(chan jetstream.Msg, d.MaxAckPending)
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(in)
	}()
	err := ConsumeUntil(ctx, js, d, log, func(m jetstream.Msg) { in <- m })
	close(in)
	<-done
	return err
}
