package settle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// A message is settled once: a second Settle, Apply or Release does
// nothing and says so; a held ack waits for Release; a failed release is
// retried as the policy says.
func TestAMessageIsSettledOnce(t *testing.T) {
	_, js := testenv.Connect(t)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 20, Prefix: "st"}); err != nil {
		t.Fatal(err)
	}
	names := bus.NamesFor("st")
	for range 3 {
		if _, err := js.Publish(ctx, names.EventsSubject(), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.EventsStream, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d messages", len(msgs))
	}
	reg := prometheus.NewRegistry()
	s := New(js, names, Limits{MaxDeliver: 5, RetryDelay: time.Second, RetryMaxDelay: time.Second}, "t", reg, zap.NewNop())
	count := func(action string) float64 { return testutil.ToFloat64(s.settled.WithLabelValues(action, "ok")) }

	a := s.Take(msgs[0])
	if d := a.Settle(Done, nil); d.Action != Ack {
		t.Fatalf("done: %+v", d)
	}
	if a.Apply(Decision{Action: Retry}, nil) || a.Settle(Done, nil).Action != Ack || count("ack") != 1 || count("retry") != 0 {
		t.Fatalf("settled twice: %v acks, %v retries", count("ack"), count("retry"))
	}

	b := s.Take(msgs[1])
	b.Hold(b.Decide(Done, nil))
	if count("ack") != 1 {
		t.Fatal("a held ack was carried out before its release")
	}
	b.Release(nil)
	b.Release(errors.New("late"))
	if count("ack") != 2 || count("retry") != 0 {
		t.Fatalf("after release: %v acks, %v retries", count("ack"), count("retry"))
	}

	c := s.Take(msgs[2])
	c.Hold(c.Decide(Done, nil))
	c.Release(errors.New("raw log down"))
	if count("ack") != 2 || count("retry") != 1 {
		t.Fatalf("a failed release: %v acks, %v retries, want a retry", count("ack"), count("retry"))
	}
}
