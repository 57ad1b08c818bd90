package mapping

import (
	"context"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/deadletter"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
	"github.com/devicehub/eventservice/pkg/settle"
)

// streams starts NATS with the two streams under test names.
func streams(t *testing.T) (*nats.Conn, jetstream.JetStream, bus.Config) {
	t.Helper()
	nc, js := testenv.Connect(t)
	cfg := bus.Config{StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Replicas: 1, Prefix: "t"}
	if err := bus.EnsureStreams(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	return nc, js, cfg
}

// boilerRegistry holds one device: input temp goes to house.temperature,
// volt is not connected.
func boilerRegistry() *registry.Cache {
	c := registry.NewCache()
	c.Put(registry.Device{Serial: "boiler", ConnectionType: registry.ConnectionAPI, AccessToken: "x",
		Inputs: []registry.Input{{Name: "temp", Entity: "house", EntityInput: "temperature"}, {Name: "volt"}}}, 1)
	return c
}

// startWorker runs a mapper until ctx ends; its result arrives on the channel.
func startWorker(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg bus.Config, cache *registry.Cache) <-chan error {
	w := NewWorker(Config{Consumer: bus.ConsumerConfig{MaxAckPending: 100, PullBatch: 10, AckWait: 5 * time.Second}, EnvelopeMax: 100, Names: cfg.Names(),
		StaleWait: time.Second, Limits: settle.Limits{MaxDeliver: 50, RetryDelay: 50 * time.Millisecond, RetryMaxDelay: 200 * time.Millisecond}},
		nc, js, cache, nil, nil, zap.NewNop())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return done
}

// One message carrying events of every kind: the mapper answers the ones it
// cannot map itself (the unreadable one also goes to the dead letters), puts
// the rest in one envelope for the writer, which answers them, and acks the
// message once that is stored.
func TestAMessageOfManyEventsIsMappedIntoOneEnvelope(t *testing.T) {
	nc, js, cfg := streams(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := boilerRegistry()
	replies, err := nc.SubscribeSync("t.reply.test")
	if err != nil {
		t.Fatal(err)
	}

	const reply = "t.reply.test"
	var msg []byte
	for _, ev := range []event.Event{
		{ID: "stored", Serial: "boiler", Rev: 1, Reply: reply, Payload: []byte(`{"serial":"boiler","data":{"temp":21.5}}`)},
		{ID: "unknown", Serial: "nobody", Reply: reply, Payload: []byte(`{"serial":"nobody","data":{}}`)},
		{ID: "unconnected", Serial: "boiler", Rev: 1, Reply: reply, Payload: []byte(`{"serial":"boiler","data":{"volt":3}}`)},
		{ID: "unreadable", Serial: "boiler", Rev: 1, Reply: reply, Payload: []byte(`{"data":`)},
	} {
		msg = event.AppendEvent(msg, &ev)
	}
	if _, err := js.Publish(ctx, cfg.Names().EventsSubject(), msg); err != nil {
		t.Fatal(err)
	}

	done := startWorker(ctx, nc, js, cfg, cache)

	got := map[string]outcome.Code{}
	for len(got) < 2 {
		m, err := replies.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("answers so far %v: %v", got, err)
		}
		rs, err := event.DecodeReplies(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			got[r.ID] = r.Code
		}
	}
	want := map[string]outcome.Code{"unknown": outcome.DeviceNotFound, "unreadable": outcome.ProcessingFailed}
	for id, code := range want {
		if got[id] != code {
			t.Fatalf("answers %v, want %v", got, want)
		}
	}

	mapped, err := js.Stream(ctx, "T_MAPPED")
	if err != nil {
		t.Fatal(err)
	}
	// The answers can come before the envelope's publish is stored: the
	// mapper does not wait for its ack to answer what it finished itself.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if info, err := mapped.Info(ctx); err == nil && info.State.Msgs > 0 {
			break
		}
	}
	env, err := mapped.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("no envelope: %v", err)
	}
	ms, err := event.DecodeEnvelope(env.Data)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
		switch m.ID {
		case "stored":
			if m.Reply != reply || m.Outcome != outcome.Stored || len(m.Values) != 1 || m.Values[0].Entity != "house" {
				t.Fatalf("stored event mapped as %+v", m)
			}
		case "unconnected":
			if m.Reply != reply || m.Outcome != outcome.NoConnections {
				t.Fatalf("raw-message-only event mapped as %+v (the writer answers it)", m)
			}
		}
	}
	sort.Strings(ids)
	if len(ids) != 2 || ids[0] != "stored" || ids[1] != "unconnected" {
		t.Fatalf("envelope holds %v", ids)
	}
	if info, _ := mapped.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("%d envelopes, want 1", info.State.Msgs)
	}
	events, _ := js.Stream(ctx, "T_EVENTS")
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := events.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the events message was not acked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The unreadable event, and only it, is a dead letter with its reason.
	letters, err := deadletter.List(ctx, js, cfg.Names(), 0, 10)
	if err != nil || len(letters) != 1 {
		t.Fatalf("dead letters %+v, %v; want the unreadable event", letters, err)
	}
	if l := letters[0]; l.Reason != settle.ReasonPermanent || l.Subject != cfg.Names().EventsSubject() || !strings.Contains(l.Error, "unreadable payload") {
		t.Fatalf("dead letter %+v", l)
	}
	dl, _ := js.Stream(ctx, cfg.Names().DeadLetterStream)
	raw, err := dl.GetMsg(ctx, letters[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if evs, err := event.DecodeEvents(raw.Data); err != nil || len(evs) != 1 || evs[0].ID != "unreadable" {
		t.Fatalf("dead letter holds %+v, %v", evs, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An events message stays in its stream until its envelope is stored: with
// the writer's stream gone, the mapper keeps it (and answers nothing: the
// requests go on waiting), and hands it on once the stream is back.
func TestAMessageIsKeptUntilItsEnvelopeIsStored(t *testing.T) {
	nc, js, cfg := streams(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := js.DeleteStream(ctx, "T_MAPPED"); err != nil {
		t.Fatal(err)
	}
	cache := boilerRegistry()
	replies, err := nc.SubscribeSync("t.reply.kept")
	if err != nil {
		t.Fatal(err)
	}
	var msg []byte
	for _, ev := range []event.Event{
		{ID: "a", Serial: "boiler", Rev: 1, Reply: "t.reply.kept", Payload: []byte(`{"serial":"boiler","data":{"temp":1}}`)},
		{ID: "b", Serial: "boiler", Rev: 1, Reply: "t.reply.kept", Payload: []byte(`{"serial":"boiler","data":{"volt":3}}`)},
	} {
		msg = event.AppendEvent(msg, &ev)
	}
	if _, err := js.Publish(ctx, cfg.Names().EventsSubject(), msg); err != nil {
		t.Fatal(err)
	}
	done := startWorker(ctx, nc, js, cfg, cache)

	events, err := js.Stream(ctx, "T_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	// Several publish attempts (each retried 250 ms later) fail meanwhile.
	time.Sleep(time.Second)
	if info, err := events.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("events stream holds %v messages (%v) while the envelope cannot be stored, want 1", info.State.Msgs, err)
	}
	if m, err := replies.NextMsg(10 * time.Millisecond); err == nil {
		t.Fatalf("answered before anything was stored: %q", m.Data)
	}

	if err := bus.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	mapped, _ := js.Stream(ctx, "T_MAPPED")
	var env *jetstream.RawStreamMsg
	deadline := time.Now().Add(5 * time.Second)
	for env == nil {
		env, err = mapped.GetMsg(ctx, 1)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("no envelope once the stream is back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ms, err := event.DecodeEnvelope(env.Data); err != nil || len(ms) != 2 || ms[1].ID != "b" || ms[1].Outcome != outcome.NoConnections || ms[1].Reply != "t.reply.kept" {
		t.Fatalf("envelope %+v %v", ms, err)
	}
	if m, err := replies.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the mapper answered what the writer answers: %q", m.Data)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// inProcessJS stands for a stream that holds an envelope's message id "in
// process" for good (a proposal lost with a node's unsynced log): the first
// publish's ack never comes, and every publish of that id is refused so.
type inProcessJS struct {
	jetstream.JetStream
	mu      sync.Mutex
	wedged  string // the message id refused
	refused int
}

func (j *inProcessJS) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch id := msg.Header.Get(nats.MsgIdHdr); {
	case j.wedged == "":
		j.wedged = id
		return lostAck{msg: msg, err: make(chan error, 1)}.fail(jetstream.ErrAsyncPublishTimeout), nil
	case id == j.wedged:
		return lostAck{msg: msg, err: make(chan error, 1)}.fail(errWedged), nil
	}
	return j.JetStream.PublishMsgAsync(msg, opts...)
}

func (j *inProcessJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	j.mu.Lock()
	if id := msg.Header.Get(nats.MsgIdHdr); id == j.wedged {
		j.refused++
		j.mu.Unlock()
		return nil, errWedged
	}
	j.mu.Unlock()
	return j.JetStream.PublishMsg(ctx, msg, opts...)
}

var errWedged = &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}

type lostAck struct {
	msg *nats.Msg
	err chan error
}

func (l lostAck) fail(err error) lostAck       { l.err <- err; return l }
func (l lostAck) Ok() <-chan *jetstream.PubAck { return nil }
func (l lostAck) Err() <-chan error            { return l.err }
func (l lostAck) Msg() *nats.Msg               { return l.msg }

// An envelope whose id the stream keeps "in process" on every re-publish
// goes under another id, its events marked maybe stored (the writer checks
// them), and its input is acked: the pipeline moves on instead of waiting
// out the stream's duplicate window.
func TestAnEnvelopeIDKeptInProcessIsSentUnderAnother(t *testing.T) {
	nc, js, cfg := streams(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := event.Event{ID: "wedged", Serial: "boiler", Rev: 1, Payload: []byte(`{"serial":"boiler","data":{"temp":20}}`)}
	if _, err := js.Publish(ctx, cfg.Names().EventsSubject(), event.AppendEvent(nil, &ev)); err != nil {
		t.Fatal(err)
	}
	wjs := &inProcessJS{JetStream: js}
	done := startWorker(ctx, nc, wjs, cfg, boilerRegistry())
	mapped, err := js.Stream(ctx, "T_MAPPED")
	if err != nil {
		t.Fatal(err)
	}
	var env *jetstream.RawStreamMsg
	for deadline := time.Now().Add(15 * time.Second); env == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no envelope in the mapped stream")
		}
		env, _ = mapped.GetMsg(ctx, 1)
	}
	wjs.mu.Lock()
	wedged, refused := wjs.wedged, wjs.refused
	wjs.mu.Unlock()
	if refused != republishing.Tries || env.Header.Get(nats.MsgIdHdr) != wedged+"-again" {
		t.Fatalf("envelope id %q after %d refusals, want %q after %d", env.Header.Get(nats.MsgIdHdr), refused, wedged+"-again", republishing.Tries)
	}
	ms, err := event.DecodeEnvelope(env.Data)
	if err != nil || len(ms) != 1 || ms[0].ID != "wedged" || !ms[0].MaybeStored {
		t.Fatalf("envelope %+v (%v), want the event marked maybe stored", ms, err)
	}
	events, err := js.Consumer(ctx, "T_EVENTS", cfg.Names().MapperConsumer)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := events.Info(ctx)
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the events message is not acked: %+v (%v)", info, err)
		}
	}
	if info, _ := mapped.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("mapped stream holds %d envelopes, want 1", info.State.Msgs)
	}
	cancel()
	<-done
}
