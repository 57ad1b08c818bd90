package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// NATS is not an open door: an anonymous client or a wrong password is
// refused, and each program's user is held to its own subjects (the
// permissions of deploy/nats/auth.conf, as the stack runs them).
func TestNATSLeastPrivilege(t *testing.T) {
	ns := testenv.NATSControl(t)
	url := ns.ClientURL()
	if _, err := nats.Connect(url); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("anonymous client: %v, want an authorization violation", err)
	}
	if _, err := nats.Connect(url, nats.UserInfo("mapper-worker", "guess")); err == nil {
		t.Fatal("a wrong password got in")
	}
	// The operator sets up what the programs would: streams and the bucket.
	opJS := testenv.OperatorJS(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := bus.DefaultNames
	for _, st := range []jetstream.StreamConfig{
		{Name: names.EventsStream, Subjects: []string{names.EventsSubject()}},
		{Name: names.MappedStream, Subjects: []string{names.MappedSubject()}},
	} {
		if _, err := opJS.CreateStream(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := opJS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: testenv.RegistryBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ZGV2LTE", []byte(`{"serial":"dev-1","accessToken":"tok"}`)); err != nil {
		t.Fatal(err)
	}

	as := func(user string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(url, nats.UserInfo(user, testenv.NATSPassword(user)), nats.CustomInboxPrefix(bus.Inbox(user)),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})) // the violations are what is tested
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		return nc, js
	}
	denied := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed", what)
			return
		}
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permission") &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("%s: %v, want a permissions violation", what, err)
		}
	}
	// A denied request gets no answer: it times out.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }

	// ingest-api publishes events and writes the registry, but cannot
	// delete a stream.
	_, ingJS := as("ingest-api")
	c1, cancel1 := short()
	defer cancel1()
	if _, err := ingJS.Publish(c1, names.EventsSubject(), []byte("{}")); err != nil {
		t.Errorf("ingest-api publishing an event: %v", err)
	}
	c2, cancel2 := short()
	defer cancel2()
	denied("ingest-api deleting the events stream", ingJS.DeleteStream(c2, names.EventsStream))

	// The mapper reads the registry, but cannot write it, publish events
	// or read another consumer's stream.
	_, mapJS := as("mapper-worker")
	c3, cancel3 := short()
	defer cancel3()
	mkv, err := mapJS.KeyValue(c3, testenv.RegistryBucket)
	if err != nil {
		t.Fatalf("mapper-worker opening the registry: %v", err)
	}
	c4, cancel4 := short()
	defer cancel4()
	if e, err := mkv.Get(c4, "ZGV2LTE"); err != nil || !strings.Contains(string(e.Value()), "dev-1") {
		t.Errorf("mapper-worker reading the registry: %v", err)
	}
	c5, cancel5 := short()
	defer cancel5()
	_, err = mkv.Put(c5, "ZGV2LTE", []byte(`{"serial":"dev-1","accessToken":"mine"}`))
	denied("mapper-worker writing the registry", err)
	c6, cancel6 := short()
	defer cancel6()
	_, err = mapJS.Publish(c6, names.EventsSubject(), []byte("{}"))
	denied("mapper-worker publishing an event", err)
	c7, cancel7 := short()
	defer cancel7()
	_, err = mapJS.CreateOrUpdateConsumer(c7, names.MappedStream, jetstream.ConsumerConfig{Durable: names.WriterConsumer})
	denied("mapper-worker consuming the writer's stream", err)
	c11, cancel11 := short()
	defer cancel11()
	_, err = mapJS.KeyValue(c11, names.BackfillBucket)
	denied("mapper-worker reading the backfill jobs", err)

	// The writer cannot read the registry or publish events.
	_, wrJS := as("writer-worker")
	c8, cancel8 := short()
	defer cancel8()
	_, err = wrJS.KeyValue(c8, testenv.RegistryBucket)
	denied("writer-worker reading the registry", err)
	c9, cancel9 := short()
	defer cancel9()
	_, err = wrJS.Publish(c9, names.EventsSubject(), []byte("{}"))
	denied("writer-worker publishing an event", err)
	c10, cancel10 := short()
	defer cancel10()
	denied("writer-worker purging the events stream", func() error {
		st, err := wrJS.Stream(c10, names.EventsStream)
		if err != nil {
			return err
		}
		return st.Purge(c10)
	}())
}
