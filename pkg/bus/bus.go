// Package bus is the programs' NATS: the topology they share (topology.go),
// connecting the same way in every program, consuming, and the users.
package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/retry"
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
	// Replicas of the streams and the buckets: 1 for a single server, 3
	// for a JetStream cluster.
	Replicas int
	// StreamMaxAge and StreamMaxBytes bound what a stream may hold while a
	// stage is down; publishes beyond are refused, not dropped.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// Prefix names everything (see NamesFor).
	Prefix string
}

// Names are the deployment's names, derived from Prefix.
func (c Config) Names() Names { return NamesFor(c.Prefix) }

// Register adds the NATS settings every program shares.
func (c *Config) Register(s *envflag.Set) {
	s.String(&c.URL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	s.String(&c.CredsFile, "nats-creds", "", "NATS credentials file (JWT + nkey)")
	s.String(&c.User, "nats-user", "", "NATS user of this program (deploy/nats/auth.conf has one per program)")
	s.Secret(&c.Password, "nats-password", "password of NATS_USER (from a secret; never logged)")
	s.String(&c.TLSCAFile, "nats-tls-ca", "", "CA file to verify the NATS server")
	s.String(&c.TLSCert, "nats-tls-cert", "", "client certificate for NATS mutual TLS")
	s.String(&c.TLSKey, "nats-tls-key", "", "client key for NATS mutual TLS")
	s.Int(&c.Replicas, "nats-replicas", 1, "replicas of streams and buckets (3 in a cluster)")
	s.Duration(&c.StreamMaxAge, "nats-stream-max-age", 24*time.Hour, "oldest message a work stream keeps while a stage is down")
	s.Int64(&c.StreamMaxBytes, "nats-stream-max-bytes", 1<<30, "bytes a stream may hold (work streams then refuse publishes; the dead letters drop their oldest)")
	s.String(&c.Prefix, "nats-prefix", DefaultPrefix, "first tokens of every subject; streams and buckets are named after it (PREFIX_EVENTS, prefix_registry, ...), so two deployments can share a NATS account")
}

// Validate reports the first thing wrong with c.
func (c Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("NATS_URL is empty")
	case !urlsParse(c.URL):
		return errors.New("NATS_URL is not a comma-separated list of URLs") // the parser's error quotes the text, password included
	case c.Replicas < 1 || c.Replicas > 5:
		return errors.New("NATS_REPLICAS must be 1 to 5")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("NATS_TLS_CERT and NATS_TLS_KEY go together")
	case (c.User == "") != (c.Password == ""):
		return errors.New("NATS_USER and NATS_PASSWORD go together")
	case c.StreamMaxAge < PipelineWindow:
		return fmt.Errorf("NATS_STREAM_MAX_AGE must be at least %s", PipelineWindow)
	case c.StreamMaxBytes <= 0:
		return errors.New("NATS_STREAM_MAX_BYTES must be positive")
	case !validPrefix(c.Prefix):
		return errors.New("NATS_PREFIX must be dot-separated tokens of letters, digits, '-' and '_'")
	}
	return nil
}

// urlsParse reports whether every server of urls parses as the client
// will parse it (with nats:// when it names no scheme).
func urlsParse(urls string) bool {
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" && !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		if _, err := url.Parse(u); err != nil {
			return false
		}
	}
	return true
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
	if err := UntilReady(ctx, log, func(ctx context.Context) error { return ensureStreams(ctx, js, cfg, log) }); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// UntilReady runs a JetStream set-up call until it succeeds, ctx ends, or it
// fails in a way that will not pass by itself (setup may mark an error
// throttled to have it tried again after a wait: something another program
// creates). In a cluster the JetStream API
// may not answer for a while (a leader election, several programs creating
// the same stream at once): a program waits rather than exits.
func UntilReady(ctx context.Context, log *zap.Logger, setup func(context.Context) error) error {
	return untilReady.Do(ctx, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := setup(actx)
		if err != nil && failure.KindOf(err) == failure.Transient && !retryable(err) {
			return failure.AsPermanent(err) // will not pass by itself
		}
		return err
	}, func(_ int, err error, _ time.Duration) {
		log.Warn("jetstream not ready, retrying", zap.Error(err))
	})
}

// untilReady is UntilReady's schedule: up to 1 s between the first tries,
// up to 5 s later on.
var untilReady = retry.Backoff{Initial: time.Second, Max: 5 * time.Second}

// retryable reports whether a JetStream API error may pass by itself.
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoHeartbeat)
}
