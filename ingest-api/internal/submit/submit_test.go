package submit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/reply"
)

// pipeline is a Submitter on a real JetStream whose "workers" answer each
// event it publishes with the outcome answer gives (none: no answer), and
// whose writers' record of earlier outcomes is record. Like writer-worker,
// they read the claims log and take only the events of a message tagged
// with its entry (bus.ClaimTagHeader) whose claims the entry holds.
type pipeline struct {
	s      *Submitter
	mu     sync.Mutex
	record map[string]outcome.Code
	seen   []string // events the workers took, in order
	keyed  map[string]bool
}

func newPipeline(t testing.TB, timeout time.Duration, subject string, answer func(event.Event) (outcome.Code, bool)) *pipeline {
	t.Helper()
	nc, js := testenv.Connect(t)
	claims := openClaims(t, js)
	names := bus.DefaultNames
	waiter, err := reply.NewWaiter(nc, names.ReplyPrefix(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{record: map[string]outcome.Code{}, keyed: map[string]bool{}}
	outcomes := func(_ context.Context, ids []string) (map[string]outcome.Code, outcome.Code, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		out := map[string]outcome.Code{}
		for _, id := range ids {
			if c, ok := p.record[id]; ok {
				out[id] = c
			}
		}
		return out, outcome.Stored, nil
	}
	if subject == "" {
		subject = names.EventsSubject()
	}
	p.s = New(Config{Subject: subject, MaxBytes: 1 << 20, OutcomeTimeout: timeout}, js, claims, waiter, outcomes, nil, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.s.Run(ctx) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, names.EventsStream, jetstream.ConsumerConfig{Durable: "t", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	log, err := claimlog.Open(ctx, js, names, "", nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() { read <- log.Run(ctx) }()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		evs, _ := event.DecodeEvents(m.Data())
		var entry *claimlog.Entry
		if tag := m.Headers().Get(bus.ClaimTagHeader); tag != "" {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			e, err := log.WaitDecision(dctx, tag)
			cancel()
			if err != nil {
				if ctx.Err() == nil { // not the test's end
					t.Errorf("entry %s not read: %v", tag, err)
				}
				return
			}
			entry = &e
		}
		var rs []event.Reply
		p.mu.Lock()
		for _, ev := range evs {
			if entry != nil && !entry.Holds(event.ClaimID(ev.ID, ev.Group)) {
				continue
			}
			p.seen, p.keyed[ev.ID] = append(p.seen, ev.ID), ev.Keyed
			if code, ok := answer(ev); ok {
				rs = append(rs, event.Reply{ID: ev.ID, Code: code})
				p.record[ev.ID] = code
			}
		}
		p.mu.Unlock()
		if rs != nil {
			_ = nc.Publish(evs[0].Reply, event.AppendReplies(nil, rs))
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Stop(); cancel(); <-done; <-read; _ = waiter.Close() })
	return p
}

// backlog marks evs the messages of one backlog request claimed as claim.
func backlog(evs []*event.Event, claim string) []*event.Event {
	for _, ev := range evs {
		ev.Group = claim
	}
	return evs
}

func events(waiter string, ids ...string) []*event.Event {
	out := make([]*event.Event, len(ids))
	for i, id := range ids {
		out[i] = &event.Event{ID: id, Serial: "s", Reply: waiter, Payload: []byte(`{}`)}
	}
	return out
}

func codes(rs []event.Reply) []outcome.Code {
	out := make([]outcome.Code, len(rs))
	for i, r := range rs {
		out[i] = r.Code
	}
	return out
}

// A single reading and a backlog each get their events' outcomes, in
// order; a keyed retry of a backlog whose events are in the pipeline does
// not enter it again and gets the first attempt's outcomes.
func TestSubmitReturnsEachEventsOutcome(t *testing.T) {
	p := newPipeline(t, 5*time.Second, "", func(ev event.Event) (outcome.Code, bool) {
		if ev.ID == "b2" {
			return outcome.NoConnections, true
		}
		return outcome.Stored, true
	})
	w := p.s.waiter.Subject()
	ctx := context.Background()
	got, err := p.s.Submit(ctx, events(w, "one"), "")
	if err != nil || !reflect.DeepEqual(codes(got), []outcome.Code{outcome.Stored}) || got[0].ID != "one" {
		t.Fatalf("single reading: %v %v", got, err)
	}
	got, err = p.s.Submit(ctx, backlog(events(w, "b1", "b2", "b3"), "b"), "b")
	if want := []outcome.Code{outcome.Stored, outcome.NoConnections, outcome.Stored}; err != nil || !reflect.DeepEqual(codes(got), want) {
		t.Fatalf("keyed backlog: %v %v, want %v", codes(got), err, want)
	}
	// The retry: the claims are taken, the record answers.
	got, err = p.s.Submit(ctx, backlog(events(w, "b1", "b2", "b3"), "b"), "b")
	if want := []outcome.Code{outcome.Stored, outcome.NoConnections, outcome.Stored}; err != nil || !reflect.DeepEqual(codes(got), want) {
		t.Fatalf("retry: %v %v, want %v", codes(got), err, want)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := []string{"one", "b1", "b2", "b3"}; !reflect.DeepEqual(p.seen, want) {
		t.Fatalf("events in the stream %v, want %v", p.seen, want)
	}
	if want := map[string]bool{"one": false, "b1": true, "b2": true, "b3": true}; !reflect.DeepEqual(p.keyed, want) {
		t.Fatalf("events marked keyed %v, want %v", p.keyed, want)
	}
}

// Without an answer a submission fails with the timeout, a keyed retry
// waiting for an earlier attempt with that attempt's text; a submission too
// large for one envelope, or refused by the stream, fails at once; a
// client that goes away gets its context's error.
func TestSubmitFailures(t *testing.T) {
	p := newPipeline(t, 300*time.Millisecond, "", func(event.Event) (outcome.Code, bool) { return 0, false })
	w := p.s.waiter.Subject()
	ctx := context.Background()
	failure := func(err error) *Failure {
		t.Helper()
		var f *Failure
		if !errors.As(err, &f) {
			t.Fatalf("%v is not a Failure", err)
		}
		return f
	}
	_, err := p.s.Submit(ctx, events(w, "lost"), "")
	if f := failure(err); f.Code != outcome.ProcessingFailed || f.Detail != timedOut {
		t.Fatalf("no answer: %+v", f)
	}
	if _, err = p.s.Submit(ctx, events(w, "k"), "k"); failure(err).Detail != timedOut {
		t.Fatalf("first keyed attempt: %v", err)
	}
	if _, err = p.s.Submit(ctx, events(w, "k"), "k"); failure(err).Detail != earlierTimeout {
		t.Fatalf("keyed retry: %v", err)
	}
	big := events(w, "big")
	big[0].Payload = make([]byte, 1<<20)
	if _, err = p.s.Submit(ctx, big, ""); failure(err).Code != outcome.PayloadTooLarge {
		t.Fatalf("too large: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err = p.s.Submit(cctx, events(w, "gone"), ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("client gone: %v", err)
	}
}

// A keyed backlog retried with a message more than its first attempt had
// waits for outcomes the first attempt never gives: it is answered with the
// earlier attempt's timeout, and its new message does not enter the
// pipeline while the first attempt's claim stands.
func TestAKeyedRetryThatAddsMessagesWaitsForTheClaim(t *testing.T) {
	p := newPipeline(t, 500*time.Millisecond, "", func(event.Event) (outcome.Code, bool) { return outcome.Stored, true })
	w := p.s.waiter.Subject()
	ctx := context.Background()
	if got, err := p.s.Submit(ctx, backlog(events(w, "m1", "m2"), "m"), "m"); err != nil || len(got) != 2 {
		t.Fatalf("first attempt: %v %v", got, err)
	}
	_, err := p.s.Submit(ctx, backlog(events(w, "m1", "m2", "m3"), "m"), "m")
	var f *Failure
	if !errors.As(err, &f) || f.Code != outcome.ProcessingFailed || f.Detail != earlierTimeout {
		t.Fatalf("retry with a message more: %v, want %q", err, earlierTimeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := []string{"m1", "m2"}; !reflect.DeepEqual(p.seen, want) {
		t.Fatalf("events in the stream %v, want %v", p.seen, want)
	}
}

// A message no stream takes fails its submission at once, as not accepted.
func TestSubmitRefused(t *testing.T) {
	p := newPipeline(t, 5*time.Second, "nostream.in", func(event.Event) (outcome.Code, bool) { return outcome.Stored, true })
	start := time.Now()
	_, err := p.s.Submit(context.Background(), events(p.s.waiter.Subject(), "refused"), "")
	var f *Failure
	if !errors.As(err, &f) || f.Code != outcome.ProcessingFailed || !strings.HasPrefix(f.Detail, notAccepted) || time.Since(start) > 4*time.Second {
		t.Fatalf("refused: %v after %s", err, time.Since(start))
	}
}

// BenchmarkSubmit: single readings from concurrent requests through a real
// JetStream to a worker that answers each, as the hot path does, without
// and with an Idempotency-Key (a first attempt: its claim is free). Besides
// ns/op (throughput of 64 concurrent requests) it reports the median and
// 99th percentile of a Submit's time.
func BenchmarkSubmit(b *testing.B) {
	for _, c := range []struct {
		name  string
		keyed bool
	}{{"plain", false}, {"keyed", true}} {
		b.Run(c.name, func(b *testing.B) {
			p := newPipeline(b, 5*time.Second, "", func(event.Event) (outcome.Code, bool) { return outcome.Stored, true })
			w := p.s.waiter.Subject()
			var n atomic.Int64
			var mu sync.Mutex
			var took []time.Duration
			b.ReportAllocs()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					id := fmt.Sprintf("bench-%d", n.Add(1)) // each run has a server of its own
					claimID := ""
					if c.keyed {
						claimID = id
					}
					start := time.Now()
					if _, err := p.s.Submit(context.Background(), events(w, id), claimID); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				took = append(took, mine...)
				mu.Unlock()
			})
			testenv.ReportLatency(b, took)
		})
	}
}
