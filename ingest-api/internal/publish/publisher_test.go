package publish

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
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
	p := New(Config{Subject: "ev.in", MaxEvents: 3, MaxBytes: 3 * event.EnvelopeCost(ev("", 10)), MaxPending: 1, AckWait: time.Second}, js, nil,
		func(n int) { sizes = append(sizes, n) }, zap.NewNop())
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
	p := New(Config{Subject: "nostream.in", MaxEvents: 10, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, nil, nil, zap.NewNop())
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
	p := New(Config{Subject: "ev.in", MaxEvents: 2, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, nil, nil, zap.NewNop())
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

// Keyed events take their claims, all in one round trip, and gather into
// messages of their own: a message, and the envelope made of it, is all
// keyed or all unkeyed. An event whose claim another attempt holds is told
// so and stays out.
func TestKeyedEventsAreClaimedAndGoInMessagesOfTheirOwn(t *testing.T) {
	js, read := stream(t)
	claims := openClaims(t, js)
	if _, err := claims.Take(context.Background(), "k-held"); err != nil {
		t.Fatal(err)
	}
	p := New(Config{Subject: "ev.in", MaxEvents: 10, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, claims, nil, zap.NewNop())
	keyed := func(id string) *event.Event { e := ev(id, 1); e.Keyed = true; return e }
	fails := map[string]<-chan error{}
	for _, e := range []*event.Event{ev("u0", 1), keyed("k0"), ev("u1", 1), keyed("k1"), keyed("k-held"), keyed("k0")} {
		var err error
		if e.Keyed {
			var f <-chan error
			f, err = p.AddKeyed(e)
			fails[e.ID] = f
		} else {
			_, err = p.Add(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	got := read(2)
	slices.SortFunc(got, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	if want := [][]string{{"k0", "k1"}, {"u0", "u1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	for id, f := range fails {
		select {
		case err := <-f:
			if id != "k-held" && id != "k0" || !errors.Is(err, claim.ErrTaken) {
				t.Fatalf("%s: %v", id, err)
			}
		default:
			if id == "k-held" {
				t.Fatal("k-held was not told its claim is taken")
			}
		}
	}
	// Every event that went out holds its claim.
	for _, id := range []string{"k0", "k1"} {
		if _, err := claims.Take(context.Background(), id); !errors.Is(err, claim.ErrTaken) {
			t.Fatalf("claim on %s after publishing: %v", id, err)
		}
	}
}

// When the stream refuses a keyed message, its events are told why and
// their claims are released: a retry is processed anew.
func TestARefusedKeyedMessageReleasesItsClaims(t *testing.T) {
	js, _ := stream(t)
	claims := openClaims(t, js)
	p := New(Config{Subject: "nostream.in", MaxEvents: 10, MaxBytes: 1 << 20, MaxPending: 1, AckWait: time.Second}, js, claims, nil, zap.NewNop())
	e := ev("k-refused", 1)
	e.Keyed = true
	f, err := p.AddKeyed(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	select {
	case err := <-f:
		if err == nil || errors.Is(err, claim.ErrTaken) || !NotStored(err) {
			t.Fatalf("refusal reported as %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("refusal not reported")
	}
	cl, err := claims.Take(context.Background(), "k-refused")
	if err != nil {
		t.Fatalf("the claim was not released: %v", err)
	}
	if err := claims.Release(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
}

func openClaims(t *testing.T, js jetstream.JetStream) *claim.Claims {
	t.Helper()
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26,
		Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	claims, err := claim.Open(ctx, js, bus.DefaultNames)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}
