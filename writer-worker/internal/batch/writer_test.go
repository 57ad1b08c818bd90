package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/claimlog"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore/chtest"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
	"github.com/devicehub/eventservice/writer-worker/internal/idem"
)

type rig struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store *chstore.Store
	db    string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	nc, js := testenv.Connect(t)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	_, db := testenv.ClickHouseDB(t)
	store := chtest.Open(t, "default", db)
	return &rig{nc: nc, js: js, store: store, db: db}
}

func (r *rig) run(t *testing.T, cfg Config) *Writer {
	t.Helper()
	w := New(cfg, r.nc, r.js, r.store, idem.New(r.store, nil, cfg.KeyWindow, zap.NewNop()), r.claims(t), nil, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	})
	return w
}

// claims is a reading of the claims log, read until the test ends.
func (r *rig) claims(t *testing.T) *claimlog.Log {
	t.Helper()
	l, err := claimlog.Open(context.Background(), r.js, bus.DefaultNames, "", nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-l.Ready(): // entries written from now on are after its start: it can tell what they hold
	case <-time.After(10 * time.Second):
		t.Fatal("the claims log was not read")
	}
	return l
}

// publish sends one envelope of ms, as the mapper does, with message id.
func (r *rig) publish(t *testing.T, id string, ms ...event.Mapped) {
	t.Helper()
	msg := &nats.Msg{Subject: bus.DefaultNames.MappedSubject(), Data: event.AppendEnvelope(nil, ms)}
	if _, err := r.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

// withReply returns m answered to subject.
func withReply(m event.Mapped, subject string) event.Mapped {
	m.Reply = subject
	return m
}

func (r *rig) count(t *testing.T, table, id string) uint64 {
	t.Helper()
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s.%s WHERE event_id = ?", r.db, table)
	if err := r.store.Conn().QueryRow(context.Background(), q, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mapped(id string, code outcome.Code, values ...string) event.Mapped {
	now := time.Now().UnixNano()
	m := event.Mapped{ID: id, Serial: "s1", ReceivedNs: now, ReadingNs: now - int64(time.Hour), Payload: json.RawMessage(`{"serial":"s1","data":{}}`), Outcome: code}
	for i, v := range values {
		m.Values = append(m.Values, event.Value{DeviceInput: fmt.Sprint("in", i), Entity: "ent", Input: fmt.Sprint("in", i), JSON: json.RawMessage(v)})
	}
	return m
}

var testCfg = Config{MaxBatch: 10, PacePerEvent: 10 * time.Microsecond, MaxInterval: time.Millisecond, RawMaxRows: 1000, RawInterval: 100 * time.Millisecond, InsertTimeout: 5 * time.Second, Consumer: bus.ConsumerConfig{MaxAckPending: 1000, PullBatch: 100, AckWait: 10 * time.Second},
	Names: bus.DefaultNames, KeyWindow: time.Hour,
	Limits: settle.Limits{MaxDeliver: 100, RetryDelay: 100 * time.Millisecond, RetryMaxDelay: 100 * time.Millisecond, NotReadyDelay: 100 * time.Millisecond}}

func TestWriterStoresThenAnswers(t *testing.T) {
	r := newRig(t)
	replies, err := r.nc.SubscribeSync("test.reply.>")
	if err != nil {
		t.Fatal(err)
	}
	w := r.run(t, testCfg)
	r.publish(t, "ev-1", withReply(mapped("ev-1", outcome.Stored, `1.5`, `"on"`), "test.reply.ev-1"))
	r.publish(t, "ev-2", mapped("ev-2", outcome.NoConnections))

	msg, err := replies.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := event.DecodeReplies(msg.Data)
	if err != nil || len(reps) != 1 || reps[0].ID != "ev-1" || reps[0].Code != outcome.Stored || msg.Subject != "test.reply.ev-1" {
		t.Fatalf("reply %s = %+v, %v", msg.Subject, reps, err)
	}
	// The answer came after the insert: the rows are there now.
	if n := r.count(t, "input_values", "ev-1"); n != 2 {
		t.Fatalf("ev-1 has %d values at answer time, want 2", n)
	}
	r.await(t, "device_messages", "ev-2", 1)
	if n := r.count(t, "input_values", "ev-2"); n != 0 {
		t.Fatalf("no-connections event stored %d values", n)
	}
	if _, err := replies.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatal("the writer answered a raw-only record the mapper answers")
	}
	if n := testutil.ToFloat64(w.m.rows.WithLabelValues(tableValues)); n != 2 {
		t.Errorf("rows_stored_total{table=input_values} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(w.m.rows.WithLabelValues(tableMessages)); n != 2 {
		t.Errorf("rows_stored_total{table=device_messages} = %v, want 2", n)
	}
	if n := testutil.ToFloat64(w.m.answered.WithLabelValues("stored")); n != 1 {
		t.Errorf("outcomes_total{outcome=stored} = %v, want 1", n)
	}
}

func TestWriterSkipsValuesOfARedeliveredStoredEvent(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	ev := mapped("ev-re", outcome.Stored, `7`)
	// A previous writer inserted the values and died before acking.
	if err := r.store.InsertValues(ctx, []chstore.ValueRow{{
		Entity: "ent", Input: "in0", TsNs: ev.ReadingNs, ReceivedNs: ev.ReceivedNs, Serial: "s1", DeviceInput: "in0", EventID: ev.ID, JSON: json.RawMessage(`7`),
	}}); err != nil {
		t.Fatal(err)
	}
	r.publish(t, ev.ID, ev)
	// That writer took the message (delivery 1) and never acked it.
	cons, err := r.js.CreateOrUpdateConsumer(ctx, bus.DefaultNames.MappedStream, jetstream.ConsumerConfig{
		Durable: bus.DefaultNames.WriterConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1000, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range b.Messages() {
	}
	cfg := testCfg
	cfg.Consumer.AckWait = time.Second
	cfg.InsertTimeout = 500 * time.Millisecond
	r.run(t, cfg)

	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redelivery not settled: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.count(t, "input_values", ev.ID); n != 1 {
		t.Fatalf("redelivered event has %d value rows, want 1", n)
	}
}

// A NATS node that lost power before it synced its acks hands out again, as
// first deliveries, envelopes whose events were stored: an event that old
// is checked all the same, and not stored twice; a young one is not.
func TestWriterChecksAnOldEventOnItsFirstDelivery(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	old := mapped("ev-old", outcome.Stored, `8`)
	old.ReceivedNs = time.Now().Add(-time.Minute).UnixNano()
	if err := r.store.InsertValues(ctx, valueRows([]dedupe.Item{{Event: old}}, []int{0})); err != nil {
		t.Fatal(err)
	}
	// Received by a copy whose clock runs a minute ahead of this one's:
	// its age cannot be told, so it is checked too.
	ahead := mapped("ev-ahead", outcome.Stored, `7`)
	ahead.ReceivedNs = time.Now().Add(time.Minute).UnixNano()
	if err := r.store.InsertValues(ctx, valueRows([]dedupe.Item{{Event: ahead}}, []int{0})); err != nil {
		t.Fatal(err)
	}
	young := mapped("ev-young", outcome.Stored, `9`)
	replies, err := r.nc.SubscribeSync("test.old")
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, testCfg)
	r.publish(t, "env-old", withReply(old, "test.old"), withReply(ahead, "test.old"), withReply(young, "test.old"))
	m, err := replies.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := event.DecodeReplies(m.Data)
	if err != nil || len(reps) != 3 || reps[0].Code != outcome.Stored || reps[1].Code != outcome.Stored || reps[2].Code != outcome.Stored {
		t.Fatalf("replies = %+v, %v (want all three stored)", reps, err)
	}
	if n := r.count(t, "input_values", old.ID); n != 1 {
		t.Errorf("an old event stored before has %d rows, want 1", n)
	}
	if n := r.count(t, "input_values", ahead.ID); n != 1 {
		t.Errorf("an event from a clock ahead, stored before, has %d rows, want 1", n)
	}
	if n := r.count(t, "input_values", young.ID); n != 1 {
		t.Errorf("a young event has %d rows, want 1", n)
	}
}

func TestWriterChecksEventsTheMapperSawTwice(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	stored := mapped("ev-twice", outcome.Stored, `3`)
	stored.MaybeStored = true
	// An earlier envelope carried it to storage before the mapper died.
	if err := r.store.InsertValues(ctx, []chstore.ValueRow{{
		Entity: "ent", Input: "in0", TsNs: stored.ReadingNs, ReceivedNs: stored.ReceivedNs, Serial: "s1", DeviceInput: "in0", EventID: stored.ID, JSON: []byte(`3`),
	}}); err != nil {
		t.Fatal(err)
	}
	fresh := mapped("ev-fresh", outcome.Stored, `4`)
	fresh.MaybeStored = true // redelivered to the mapper, but never stored
	replies, err := r.nc.SubscribeSync("test.twice")
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, testCfg)
	r.publish(t, "env-1", withReply(stored, "test.twice"), withReply(fresh, "test.twice"))
	m, err := replies.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := event.DecodeReplies(m.Data)
	if err != nil || len(reps) != 2 || reps[0].Code != outcome.Stored || reps[1].Code != outcome.Stored {
		t.Fatalf("replies = %+v, %v (want both stored, in one message)", reps, err)
	}
	if n := r.count(t, "input_values", stored.ID); n != 1 {
		t.Errorf("already stored event has %d rows, want 1", n)
	}
	if n := r.count(t, "input_values", fresh.ID); n != 1 {
		t.Errorf("fresh event has %d rows, want 1", n)
	}
}

func TestWriterStoresAnEventOnceWhenTwoEnvelopesCarryItInOneBatch(t *testing.T) {
	r := newRig(t)
	first := mapped("ev-dup", outcome.Stored, `5`)
	again := first
	again.MaybeStored = true // the mapper saw it twice and put it in a second envelope
	other := mapped("ev-other", outcome.Stored, `6`)
	// Both envelopes wait in the stream before the writer starts, so its
	// first batch holds both.
	r.publish(t, "env-0", first)
	r.publish(t, "env-1", again, other)
	r.run(t, testCfg)
	r.await(t, "input_values", other.ID, 1)
	if n := r.count(t, "input_values", first.ID); n != 1 {
		t.Fatalf("event carried by two envelopes has %d rows, want 1", n)
	}
}

func TestWriterRetriesRawMessagesWithoutStoringValuesTwice(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if err := r.store.Conn().Exec(ctx, "DROP TABLE "+r.db+".device_messages"); err != nil {
		t.Fatal(err)
	}
	replies, err := r.nc.SubscribeSync("test.raw")
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, testCfg)
	ev := withReply(mapped("ev-raw", outcome.Stored, `8`), "test.raw")
	r.publish(t, ev.ID, ev)
	// The values are stored and answered; the raw message insert that
	// follows fails, so the envelope is put back for redelivery.
	if _, err := replies.NextMsg(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * testCfg.RawInterval)
	if err := r.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	r.await(t, "device_messages", ev.ID, 1)
	if n := r.count(t, "input_values", ev.ID); n != 1 {
		t.Fatalf("redelivery for the raw message stored the values %d times, want 1", n)
	}
}

// nextReply returns the one reply of the next outcome message on sub.
func nextReply(t *testing.T, sub *nats.Subscription) event.Reply {
	t.Helper()
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := event.DecodeReplies(msg.Data)
	if err != nil || len(reps) != 1 {
		t.Fatalf("replies %+v, %v", reps, err)
	}
	return reps[0]
}

// await waits up to 10 s for table to hold want rows of event id.
func (r *rig) await(t *testing.T, table, id string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.count(t, table, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s rows of %s: %d, want %d", table, id, r.count(t, table, id), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keyed(m event.Mapped) event.Mapped {
	m.Keyed = true
	return m
}

// A retry of a keyed event, whenever it comes, is answered with the first
// attempt's outcome and stores nothing more: right after the first answer
// (the key row not yet written) and once the key row is in ClickHouse.
func TestWriterAnswersKeyedRetriesWithTheFirstOutcome(t *testing.T) {
	r := newRig(t)
	sub, err := r.nc.SubscribeSync("test.keyed")
	if err != nil {
		t.Fatal(err)
	}
	w := r.run(t, testCfg)

	first := withReply(keyed(mapped("k-1", outcome.Stored, `1`)), "test.keyed")
	r.publish(t, "env-1", first)
	if rep := nextReply(t, sub); rep.ID != "k-1" || rep.Code != outcome.Stored {
		t.Fatalf("first attempt: %+v", rep)
	}
	soon := withReply(keyed(mapped("k-1", outcome.Stored, `2`)), "test.keyed")
	r.publish(t, "env-2", soon)
	if rep := nextReply(t, sub); rep.ID != "k-1" || rep.Code != outcome.Stored {
		t.Fatalf("immediate retry: %+v", rep)
	}
	r.await(t, "event_keys", "k-1", 1)
	late := withReply(keyed(mapped("k-1", outcome.Stored, `3`)), "test.keyed")
	r.publish(t, "env-3", late)
	if rep := nextReply(t, sub); rep.ID != "k-1" || rep.Code != outcome.Stored {
		t.Fatalf("later retry: %+v", rep)
	}
	got, err := w.keys.Lookup(context.Background(), []string{"k-1", "k-unknown"})
	if err != nil || len(got) != 1 || got["k-1"] != outcome.Stored {
		t.Fatalf("Outcomes = %v, %v", got, err)
	}
	time.Sleep(3 * testCfg.RawInterval)
	var stored string
	if err := r.store.Conn().QueryRow(context.Background(), "SELECT value_json FROM "+r.db+".input_values WHERE event_id = 'k-1'").Scan(&stored); err != nil || stored != "1" {
		t.Fatalf("stored value %q, %v; want the first attempt's 1", stored, err)
	}
	for _, table := range []string{"input_values", "device_messages", "event_keys"} {
		if n := r.count(t, table, "k-1"); n != 1 {
			t.Errorf("%s holds %d rows of k-1, want 1", table, n)
		}
	}

	// No connections is final too: a retry after a mapping was added
	// still gets it, and stores nothing.
	r.publish(t, "env-4", withReply(keyed(mapped("k-2", outcome.NoConnections)), "test.keyed"))
	if rep := nextReply(t, sub); rep.ID != "k-2" || rep.Code != outcome.NoConnections {
		t.Fatalf("keyed no-connections: %+v", rep)
	}
	r.publish(t, "env-5", withReply(keyed(mapped("k-2", outcome.Stored, `4`)), "test.keyed"))
	if rep := nextReply(t, sub); rep.ID != "k-2" || rep.Code != outcome.NoConnections {
		t.Fatalf("retry of keyed no-connections: %+v", rep)
	}
	time.Sleep(3 * testCfg.RawInterval)
	if n := r.count(t, "input_values", "k-2"); n != 0 {
		t.Fatalf("retry stored %d values of a no-connections event", n)
	}
	if n := testutil.ToFloat64(w.m.keyedRepeats); n != 3 {
		t.Errorf("keyed_repeats_total = %v, want 3", n)
	}
}

// A keyed event whose values could not be stored is answered so and tried
// again until it is stored; an unkeyed one is dropped (its device retries).
func TestWriterRetriesKeyedEventsAfterAStorageFailure(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if err := r.store.Conn().Exec(ctx, "DROP TABLE "+r.db+".input_values"); err != nil {
		t.Fatal(err)
	}
	sub, err := r.nc.SubscribeSync("test.fail.>")
	if err != nil {
		t.Fatal(err)
	}
	w := r.run(t, testCfg)
	r.publish(t, "env-k", withReply(keyed(mapped("k-f", outcome.Stored, `5`)), "test.fail.k"))
	r.publish(t, "env-u", withReply(mapped("u-f", outcome.Stored, `6`), "test.fail.u"))
	seen := map[string]outcome.Code{}
	defer func() {
		if n := testutil.ToFloat64(w.m.failures.WithLabelValues(tableValues)); n < 1 {
			t.Errorf("storage_failures_total{table=input_values} = %v, want at least 1", n)
		}
	}()
	for len(seen) < 2 {
		rep := nextReply(t, sub)
		seen[rep.ID] = rep.Code
	}
	if seen["k-f"] != outcome.StorageFailed || seen["u-f"] != outcome.StorageFailed {
		t.Fatalf("answers during the failure: %v", seen)
	}
	if err := r.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// Retried until stored; the answer goes to the same subject.
	for {
		rep := nextReply(t, sub)
		if rep.ID == "k-f" && rep.Code == outcome.Stored {
			break
		}
	}
	r.await(t, "input_values", "k-f", 1)
	r.await(t, "event_keys", "k-f", 1)
	time.Sleep(3 * testCfg.RawInterval)
	if n := r.count(t, "input_values", "u-f"); n != 0 {
		t.Fatalf("an unkeyed event answered as failed was stored later (%d rows)", n)
	}
}

func TestExpiredKeysAreIgnoredAndDropped(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-72 * time.Hour).UnixNano()
	if err := r.store.InsertKeys(ctx, []chstore.KeyRow{{EventID: "old", TsNs: old}, {EventID: "new", TsNs: now.UnixNano(), Outcome: outcome.NoConnections}}); err != nil {
		t.Fatal(err)
	}
	got, err := r.store.KeyOutcomes(ctx, []string{"old", "new"}, now.Add(-24*time.Hour).UnixNano())
	if err != nil || len(got) != 1 || got[0].EventID != "new" || got[0].Outcome != outcome.NoConnections {
		t.Fatalf("KeyOutcomes = %v, %v", got, err)
	}
	n, err := r.store.DropPartitionsBefore(ctx, "event_keys", now.Add(-24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("dropped %d days, %v; want 1", n, err)
	}
	if r.count(t, "event_keys", "old") != 0 || r.count(t, "event_keys", "new") != 1 {
		t.Fatal("expiry dropped the wrong rows")
	}
}

// Two attempts of one keyed event in one batch, resolved differently (a
// mapping was added in between): the first one's outcome holds for both.
func TestWriterKeyedCopiesInOneBatchShareTheFirstOutcome(t *testing.T) {
	r := newRig(t)
	sub, err := r.nc.SubscribeSync("test.batch")
	if err != nil {
		t.Fatal(err)
	}
	r.publish(t, "env-a", withReply(keyed(mapped("k-b", outcome.NoConnections)), "test.batch"))
	r.publish(t, "env-b", withReply(keyed(mapped("k-b", outcome.Stored, `9`)), "test.batch"))
	// Both envelopes wait in the stream; lingering gathers them into one flush.
	cfg := testCfg
	cfg.Linger = 300 * time.Millisecond
	r.run(t, cfg)
	var reps []event.Reply
	for len(reps) < 2 {
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("after %+v: %v", reps, err)
		}
		got, err := event.DecodeReplies(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, got...)
	}
	for _, rep := range reps {
		if rep.ID != "k-b" || rep.Code != outcome.NoConnections {
			t.Fatalf("replies %+v; want both no_connections", reps)
		}
	}
	r.await(t, "event_keys", "k-b", 1)
	time.Sleep(3 * testCfg.RawInterval)
	if n := r.count(t, "input_values", "k-b"); n != 0 {
		t.Fatalf("%d values stored", n)
	}
	if n := r.count(t, "device_messages", "k-b"); n != 1 {
		t.Fatalf("%d raw messages, want 1", n)
	}
}
