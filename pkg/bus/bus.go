// Package bus names the NATS subjects, streams and consumers the programs
// share, and connects to NATS the same way in every program.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Config is what a program needs to reach NATS.
type Config struct {
	URL string
	// User and Password authenticate the program (one NATS user per
	// program: see Users).
	User      string
	Password  string
	CredsFile string
	TLSCAFile string
	TLSCert   string
	TLSKey    string
	// Replicas of the streams and the registry bucket: 1 for a single
	// server, 3 for a JetStream cluster.
	Replicas int
	// StreamMaxAge and StreamMaxBytes bound what the streams may hold
	// while a stage is down; publishes beyond are refused, not dropped.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// DedupeWindow is how long a stream remembers message ids.
	DedupeWindow time.Duration
	// DeadLetterMaxAge and DeadLetterMaxBytes bound the dead letters;
	// beyond them the oldest letters go first.
	DeadLetterMaxAge   time.Duration
	DeadLetterMaxBytes int64
	Names              Names
}

// Validate reports the first thing wrong with c.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("NATS_URL is empty")
	case c.Replicas < 1 || c.Replicas > 5:
		return errors.New("NATS_REPLICAS must be 1 to 5")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("NATS_TLS_CERT and NATS_TLS_KEY go together")
	case (c.User == "") != (c.Password == ""):
		return errors.New("NATS_USER and NATS_PASSWORD go together")
	case c.StreamMaxAge <= 0:
		return errors.New("NATS_STREAM_MAX_AGE must be positive")
	case c.StreamMaxBytes <= 0:
		return errors.New("NATS_STREAM_MAX_BYTES must be positive")
	case c.DedupeWindow <= 0 || c.DedupeWindow > c.StreamMaxAge:
		return errors.New("NATS_DEDUPE_WINDOW must be positive and at most NATS_STREAM_MAX_AGE")
	case c.DeadLetterMaxAge <= 0 || c.DeadLetterMaxBytes <= 0:
		return errors.New("NATS_DEADLETTER_MAX_AGE and NATS_DEADLETTER_MAX_BYTES must be positive")
	case !c.Names.distinctStreams():
		return errors.New("NATS_EVENTS_STREAM, NATS_MAPPED_STREAM, NATS_DEADLETTER_STREAM and NATS_CLAIMS_STREAM must be four different names without spaces, '.', '*' or '>'")
	case !validName(c.Names.MapperConsumer) || !validName(c.Names.WriterConsumer):
		return errors.New("NATS_MAPPER_CONSUMER and NATS_WRITER_CONSUMER must be names without spaces, '.', '*' or '>'")
	case !validPrefix(c.Names.SubjectPrefix):
		return errors.New("NATS_SUBJECT_PREFIX must be dot-separated subject tokens without wildcards")
	}
	return nil
}

// Connect dials NATS with reconnects forever: a program rides out a NATS
// restart instead of exiting.
func Connect(cfg Config, name string, log *zap.Logger) (*nats.Conn, jetstream.JetStream, error) {
	opts := []nats.Option{
		nats.Name(name),
		// Replies come under the program's own prefix: its NATS user may
		// subscribe there and nowhere else.
		nats.CustomInboxPrefix(Inbox(strings.ReplaceAll(name, " ", "-"))),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// While disconnected, publishes fail at once instead of waiting in
		// a buffer: ingest-api answers 503 and the device retries, rather
		// than an event being sent late behind its request's back.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", zap.String("url", nc.ConnectedUrlRedacted()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", zap.String("subject", subj), zap.Error(err))
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCAFile))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect nats: %w", err)
	}
	// An async publish whose ack never comes (NATS down) must fail in
	// bounded time rather than hold its waiter forever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(5*time.Second), jetstream.WithPublishAsyncMaxPending(16384))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// EnsureStreams creates or updates the two work-queue streams, the
// dead-letter stream and the claims stream, all at once: in a cluster each
// creation waits for its stream's leader election. Every program calls it at
// start, so the order in which they start does not matter.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	cfgs := streamConfigs(cfg)
	errs := make(chan error, len(cfgs))
	for _, sc := range cfgs {
		go func() {
			if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
				errs <- fmt.Errorf("ensure stream %s: %w", sc.Name, err)
				return
			}
			errs <- nil
		}()
	}
	var all []error
	for range cfgs {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// streamConfigs are the streams the programs share.
func streamConfigs(cfg Config) []jetstream.StreamConfig {
	n := cfg.Names
	var cfgs []jetstream.StreamConfig
	for _, s := range []struct{ name, subject, desc string }{
		{n.EventsStream, n.EventsSubject(), "accepted device events, awaiting entity mapping"},
		{n.MappedStream, n.MappedSubject(), "mapped device events, awaiting the ClickHouse write"},
	} {
		cfgs = append(cfgs, jetstream.StreamConfig{
			Name:        s.name,
			Description: s.desc,
			Subjects:    []string{s.subject},
			Retention:   jetstream.WorkQueuePolicy,
			Discard:     jetstream.DiscardNew,
			MaxAge:      cfg.StreamMaxAge,
			MaxBytes:    cfg.StreamMaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.DedupeWindow,
		})
	}
	// Dead letters are kept for reading and replay (not a work queue), and
	// when full the oldest go: a full dead-letter stream must not stop
	// ingestion. The dead-letter alert fires long before.
	cfgs = append(cfgs, jetstream.StreamConfig{
		Name:        n.DeadLetterStream,
		Description: "messages the workers gave up on (permanent failures, delivery limit): list and replay with writer-worker dead-letters",
		Subjects:    []string{n.DeadLetterSubject()},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.DeadLetterMaxAge,
		MaxBytes:    orUnlimited(cfg.DeadLetterMaxBytes),
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.DedupeWindow,
	})
	// A claim lives as long as the streams remember message ids; ingest-api
	// deletes it sooner when its event never entered the pipeline. Nothing
	// consumes claims: a claim costs one stream write.
	cfgs = append(cfgs, jetstream.StreamConfig{
		Name:              n.ClaimsStream,
		Description:       "one claim per keyed event in the pipeline: a retry with the same Idempotency-Key waits for the first attempt's outcome",
		Subjects:          []string{n.ClaimSubject("*")},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxAge:            cfg.DedupeWindow,
		MaxMsgsPerSubject: 1,
		Storage:           jetstream.FileStorage,
		Replicas:          cfg.Replicas,
		Duplicates:        cfg.DedupeWindow,
	})
	return cfgs
}

// WaitConnected blocks until nc is connected or ctx ends. With
// RetryOnFailedConnect a program starts before NATS does and waits here.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for nats: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Open connects, waits for the connection (a program may start before NATS),
// and ensures the streams: the start-up every program shares.
func Open(ctx context.Context, cfg Config, name string, log *zap.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, js, err := Connect(cfg, name, log)
	if err != nil {
		return nil, nil, err
	}
	if err := WaitConnected(ctx, nc); err != nil {
		nc.Close()
		return nil, nil, err
	}
	if err := UntilReady(ctx, log, func(ctx context.Context) error { return EnsureStreams(ctx, js, cfg) }); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// UntilReady runs a JetStream set-up call until it succeeds, ctx ends, or it
// fails in a way that will not pass by itself. In a cluster the JetStream API
// may not answer for a while (a leader election, several programs creating
// the same stream at once): a program waits rather than exits.
func UntilReady(ctx context.Context, log *zap.Logger, setup func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := setup(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return err
		}
		log.Warn("jetstream not ready, retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// retryable reports whether a JetStream API error may pass by itself.
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoHeartbeat)
}

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
