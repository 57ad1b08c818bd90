package publish

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/event"
)

// stream starts a server with a stream on "ev.>" and returns a JetStream
// context and a function that reads every message's events, in order.
func stream(t *testing.T) (jetstream.JetStream, func(want int) [][]string) {
	t.Helper()
	_, js := testenv.Connect(t)
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EV", Subjects: []string{"ev.>"}})
	if err != nil {
		t.Fatal(err)
	}
	read := func(want int) [][]string {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if int(info.State.Msgs) >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		var msgs [][]string
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				break
			}
			evs, err := event.DecodeEvents(m.Data)
			if err != nil {
				t.Fatalf("message %d: %v", seq, err)
			}
			var ids []string
			for _, e := range evs {
				ids = append(ids, e.ID)
			}
			msgs = append(msgs, ids)
		}
		return msgs
	}
	return js, read
}

func ev(id string, payload int) *event.Event {
	return &event.Event{ID: id, Serial: "s", Payload: []byte(strings.Repeat("x", payload))}
}

// Events that arrive while no message can go out share messages, up to
// MaxEvents and MaxBytes, in arrival order; once running, an event on an
// idle publisher goes out at once, alone.
func TestEventsGatherWhileThePublisherIsBusyAndGoAloneWhenIdle(t *testing.T) {
	js, read := stream(t)
	var sizes []int
	p := New(Config{Subject: "ev.in", MaxEvents: 3, MaxBytes: 3 * event.EnvelopeCost(ev("", 10)), MaxPending: 1, AckWait: time.Second}, js,
		func(n int) { sizes = append(sizes, n) })
	var batches []*Batch
	add := func(e *event.Event) {
		b, err := p.Add(e)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	// Not running yet: as if every slot were taken.
	for i := range 4 {
		add(ev(fmt.Sprint("a", i), 10))
	}
	add(ev("big", 200)) // fits beside neither a3 nor a5 by bytes
	add(ev("a5", 10))
	if batches[0] != batches[2] || batches[2] == batches[3] || batches[3] == batches[4] || batches[4] == batches[5] {
		t.Fatal("events were not grouped by MaxEvents and MaxBytes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	want := [][]string{{"a0", "a1", "a2"}, {"a3"}, {"big"}, {"a5"}}
	if got := read(4); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	add(ev("b0", 10))
	read(5)
	add(ev("b1", 10))
	want = append(want, []string{"b0"}, []string{"b1"})
	if got := read(6); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sizes, []int{3, 1, 1, 1, 1, 1}) {
		t.Fatalf("observed sizes %v", sizes)
	}
	for _, b := range batches {
		select {
		case <-b.Failed():
			t.Fatalf("a stored message reported failed: %v", b.Err())
		default:
		}
	}
}

// A message the stream refuses fails every event in it, with the reason.
func TestARefusedMessageFailsItsEvents(t *testing.T) {
	js, _ := stream(t)
	p := New(Config{Subject: "nostream.in", MaxEvents: 10, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, nil)
	a, _ := p.Add(ev("a", 1))
	b, _ := p.Add(ev("b", 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	for _, x := range []*Batch{a, b} {
		select {
		case <-x.Failed():
			if x.Err() == nil {
				t.Fatal("failed without a reason")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("refusal not reported")
		}
	}
}

// Stopping publishes what was added before, and refuses what comes after.
func TestStopPublishesWhatItHolds(t *testing.T) {
	js, read := stream(t)
	p := New(Config{Subject: "ev.in", MaxEvents: 2, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, nil)
	for i := range 5 {
		if _, err := p.Add(ev(fmt.Sprint(i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Add(ev("late", 1)); err != ErrClosed {
		t.Fatalf("Add after stop: %v", err)
	}
	if got, want := read(3), [][]string{{"0", "1"}, {"2", "3"}, {"4"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
}
