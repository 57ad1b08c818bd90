package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// programConfig is cfg of a program's copy on srv, as its NATS user.
func programConfig(url, user string, maxAge time.Duration) bus.Config {
	return bus.Config{URL: url, User: user, Password: testenv.NATSPassword(user), Replicas: 1,
		StreamMaxAge: maxAge, StreamMaxBytes: 1 << 26, Prefix: bus.DefaultPrefix}
}

// The streams' limits are those of their creation: a copy started with
// shorter ones says so and leaves the streams, and what they hold, as they
// are; and no program's user may update, purge or delete a stream, as the
// real server's permissions (deploy/nats/auth.conf) have it.
func TestProgramsCannotChangeStreams(t *testing.T) {
	srv := testenv.NATSControl(t)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, js, err := bus.Open(ctx, programConfig(url, "ingest-api", 24*time.Hour), "ingest-api", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	names := bus.DefaultNames
	for range 3 {
		if _, err := js.Publish(ctx, names.EventsSubject(), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}

	core, logs := observer.New(zap.WarnLevel)
	short := programConfig(url, "mapper-worker", bus.PipelineWindow)
	short.StreamMaxBytes = 1 << 10
	nc2, _, err := bus.Open(ctx, short, "mapper-worker", zap.New(core))
	if err != nil {
		t.Fatalf("a copy with shorter limits does not start: %v", err)
	}
	nc2.Close()
	op := testenv.OperatorJS(t, url)
	st, err := op.Stream(ctx, names.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.MaxAge != 24*time.Hour || info.Config.MaxBytes != 1<<26 || info.State.Msgs != 3 {
		t.Errorf("after a copy with shorter limits: max age %s, max bytes %d, %d messages; want 24h, %d, 3",
			info.Config.MaxAge, info.Config.MaxBytes, info.State.Msgs, 1<<26)
	}
	said := logs.FilterField(zap.String("stream", names.EventsStream)).FilterField(zap.String("limit", "max_age")).Len()
	if said != 1 {
		t.Errorf("the copy said %d times that the events stream's max age differs, want once", said)
	}

	if _, err := op.CreateStream(ctx, jetstream.StreamConfig{Name: names.AuditStream, Subjects: []string{names.AuditSubject()}}); err != nil {
		t.Fatal(err)
	}
	streams := []string{names.EventsStream, names.MappedStream, names.DeadLetterStream, names.ClaimsStream, names.DiagStream,
		names.AuditStream, "KV_" + names.RegistryBucket}
	for _, user := range []string{"ingest-api", "mapper-worker", "writer-worker"} {
		violations := make(chan error, 64)
		unc, err := nats.Connect(url, nats.UserInfo(user, testenv.NATSPassword(user)), nats.CustomInboxPrefix(bus.Inbox(user)),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range streams {
			for _, api := range []string{"UPDATE", "PURGE", "DELETE"} {
				body := `{}`
				if api == "UPDATE" {
					body = `{"name":"` + name + `","max_age":60000000000}`
				}
				if err := ask(unc, violations, "$JS.API.STREAM."+api+"."+name, body); err != nil {
					t.Errorf("%s: %v", user, err)
				}
			}
		}
		unc.Close()
	}
	if st, err = op.Stream(ctx, names.EventsStream); err != nil || st.CachedInfo().State.Msgs != 3 {
		t.Errorf("events stream after the attempts: %v", err)
	}
}

// ask sends a JetStream API request on nc and returns nil once the server
// refuses it for nc's permissions (violations has nc's async errors), an
// error if the API answers.
func ask(nc *nats.Conn, violations <-chan error, subject, body string) error {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, []byte(body)); err != nil {
		return err
	}
	answered := make(chan *nats.Msg, 1)
	go func() {
		if m, err := sub.NextMsg(10 * time.Second); err == nil {
			answered <- m
		}
		close(answered)
	}()
	for {
		select {
		case err := <-violations:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return nil
			}
		case m, ok := <-answered:
			if !ok {
				return fmt.Errorf("%s: neither refused nor answered", subject)
			}
			return fmt.Errorf("%s was let through, the API answered %s", subject, m.Data)
		}
	}
}

// A bucket is opened as it is too: a copy with another limit names that
// limit alone, and the bucket keeps its own.
func TestEnsureBucketKeepsTheBucketsLimits(t *testing.T) {
	_, js := testenv.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kc := jetstream.KeyValueConfig{Bucket: "limits", History: 1, TTL: time.Hour, MaxBytes: 1 << 20, MaxValueSize: 4 << 10,
		Storage: jetstream.FileStorage, Replicas: 1}
	if _, err := bus.EnsureBucket(ctx, js, kc, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	if _, err := bus.EnsureBucket(ctx, js, kc, zap.New(core)); err != nil || logs.Len() != 0 {
		t.Fatalf("the same bucket again: %v, %d warnings", err, logs.Len())
	}
	smaller := kc
	smaller.MaxBytes, smaller.Description = 1<<10, "another description"
	if _, err := bus.EnsureBucket(ctx, js, smaller, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, l := range logs.All() {
		said = append(said, l.ContextMap()["limit"].(string))
	}
	if len(said) != 1 || said[0] != "max_bytes" {
		t.Errorf("limits said to differ: %v, want [max_bytes]", said)
	}
	st, err := js.Stream(ctx, "KV_limits")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 1<<20 {
		t.Errorf("bucket's max bytes %d, want %d", got, 1<<20)
	}
}
