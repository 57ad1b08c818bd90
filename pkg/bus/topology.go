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

// The architecture, as NATS sees it (prefix p, streams P_*):
//
//	device --HTTP--> ingest-api --p.claims.log-<tag>--> P_CLAIMS (keyed requests: one attempt in the pipeline; every ingest-api copy follows it)
//	                 ingest-api --p.events.in----> P_EVENTS      --consumer "mapper"--> mapper-worker
//	mapper-worker --p.mapped.in----> P_MAPPED    --consumer "writer"--> writer-worker --> ClickHouse
//	writer-worker --p.reply.<copy>--> ingest-api (the storage outcome the request waits for)
//	either worker --p.deadletter--->  P_DEADLETTER (what they gave up on; operators replay it)
//	ingest-api --p.query.<kind>--> writer-worker (workspace reads); ingest-api <--> ingest-api on p.ratelimit
//	ingest-api --p.audit--> P_AUDIT; KV buckets p_registry (devices) and p_keys (workspace keys)
//	ingest-api, mapper-worker --p.diag--> P_DIAG --consumer "diag"--> writer-worker (device diagnostics)
//	ingest-api <--KV p_backfills--> writer-worker (backfill jobs: created and cancelled, run)
//	ingest-api <--KV p_census--> ingest-api (which TOKEN_KEYs each live copy reads)
//
// Every name derives from the prefix, so two deployments share a NATS
// account by taking different prefixes.

// PipelineWindow is how long a keyed reading's claim lasts (a retry inside
// it waits for the first attempt instead of entering the pipeline; after
// it, writer-worker's record of outcomes answers), and how long the mapped
// stream drops a second publish of one envelope (a redelivered events
// message mapped again).
const PipelineWindow = 2 * time.Minute

// ClaimsKept is how long the claims stream keeps an entry: the pipeline
// window twice, so that a copy that starts reading the log (a writer-worker
// restarted while keyed events wait in the streams for it) can tell what
// the entries of the last window hold (pkg/claimlog).
const ClaimsKept = 2 * PipelineWindow

// deadLetterMaxAge is how long a dead letter is kept for operators to
// read and replay.
const deadLetterMaxAge = 14 * 24 * time.Hour

// diagMaxAge and diagMaxBytes bound the diagnostics reports waiting for
// writer-worker: a day of them, 256 MiB at most.
const (
	diagMaxAge   = 24 * time.Hour
	diagMaxBytes = 256 << 20
)

// DefaultPrefix is NATS_PREFIX's default.
const DefaultPrefix = "devices"

// Names are the streams, consumers, buckets and subjects of one deployment.
// Events carry the serial in the body, not in the subject: serials may hold
// characters a subject cannot.
type Names struct {
	SubjectPrefix    string // p: starts every subject
	EventsStream     string // accepted events, consumed by mapper-worker
	MappedStream     string // envelopes of mapped events, consumed by writer-worker
	DeadLetterStream string // what the workers gave up on
	ClaimsStream     string // the claims log: one entry per keyed message in the pipeline
	AuditStream      string // the workspace's audit trail (ingest-api's alone)
	DiagStream       string // device diagnostics reports, consumed by writer-worker
	RegistryBucket   string // the device registry
	KeysBucket       string // the workspace API's keys
	BackfillBucket   string // backfill jobs (pkg/backfill) and the lease of who runs them
	CensusBucket     string // the live ingest-api copies and the TOKEN_KEYs each reads (pkg/registry.Census)
	MapperConsumer   string // durable consumer of EventsStream
	WriterConsumer   string // durable consumer of MappedStream
	DiagConsumer     string // durable consumer of DiagStream
}

// NamesFor derives every name from prefix (dot-separated tokens of
// letters, digits, '-' and '_').
func NamesFor(prefix string) Names {
	up := strings.ToUpper(strings.ReplaceAll(prefix, ".", "_"))
	low := strings.ToLower(up)
	return Names{
		SubjectPrefix:    prefix,
		EventsStream:     up + "_EVENTS",
		MappedStream:     up + "_MAPPED",
		DeadLetterStream: up + "_DEADLETTER",
		ClaimsStream:     up + "_CLAIMS",
		AuditStream:      up + "_AUDIT",
		DiagStream:       up + "_DIAG",
		RegistryBucket:   low + "_registry",
		KeysBucket:       low + "_keys",
		BackfillBucket:   low + "_backfills",
		CensusBucket:     low + "_census",
		MapperConsumer:   "mapper",
		WriterConsumer:   "writer",
		DiagConsumer:     "diag",
	}
}

// DefaultNames are the names of the default prefix.
var DefaultNames = NamesFor(DefaultPrefix)

// EventsSubject is where ingest-api publishes accepted events.
func (n Names) EventsSubject() string { return n.SubjectPrefix + ".events.in" }

// MappedSubject is where mapper-worker publishes envelopes.
func (n Names) MappedSubject() string { return n.SubjectPrefix + ".mapped.in" }

// ClaimedHeader, set to "1" on an events message and on the envelope
// mapped from it, says that every event in it is covered by its request's
// claim, taken before it was published (ingest-api/internal/claim;
// event.ClaimID): writer-worker may then know a first attempt without a
// lookup (writer-worker/internal/idem, Seen). Messages of copies that do
// not set it (1.0.0) are looked up.
const ClaimedHeader = "Events-Claimed"

// ClaimTagHeader, on a keyed events message and the envelope mapped from
// it, names the claims log entry its requests' claims are in, sent ahead of
// it without waiting (ingest-api/internal/claim; the two streams do not
// order one against the other): writer-worker waits for the entry, stores
// the events of the requests it holds and drops the others (pkg/claimlog). A
// message without it was published after its claims were decided (the
// release before, or CLAIM_FIRST): it holds only events whose claims held.
const ClaimTagHeader = "Events-Claim-Tag"

// CarryClaims copies ClaimedHeader and ClaimTagHeader, when set, from an
// events message (header: its headers' values) to its envelope's out.
func CarryClaims(header func(string) string, out nats.Header) {
	for _, k := range []string{ClaimedHeader, ClaimTagHeader} {
		if v := header(k); v != "" {
			out.Set(k, v)
		}
	}
}

// ClaimSubject is the subject of a keyed request's claim on id (event.ClaimID, a UUID:
// one subject token), as copies of 1.0.x took it: one message per claim.
func (n Names) ClaimSubject(id string) string { return n.SubjectPrefix + ".claims." + id }

// The claims log (ingest-api/internal/claim): one entry per keyed message,
// listing the claim ids of its requests, and one per release, each on a
// subject of its own (the claims stream keeps one message per subject).
const (
	claimLogToken     = "log-"
	claimReleaseToken = "release-"
	claimFreeToken    = "free-"
)

// ClaimLogSubject is the subject of the claims log's entry tagged tag.
func (n Names) ClaimLogSubject(tag string) string { return n.ClaimSubject(claimLogToken + tag) }

// ClaimReleaseSubject is the subject of the release of the entry tagged tag.
func (n Names) ClaimReleaseSubject(tag string) string { return n.ClaimSubject(claimReleaseToken + tag) }

// ClaimFreeSubject is the subject of the release of some of the ids of the
// entry tagged tag: a subject apart from ClaimReleaseSubject's, so that the
// release of the whole entry does not replace it in the stream.
func (n Names) ClaimFreeSubject(tag string) string { return n.ClaimSubject(claimFreeToken + tag) }

// ClaimEntry reads a message of the claims stream: the claim ids it lists
// and its tag (a claim of 1.0.x: its one id, no tag), or, release set, the
// tag of the entry it releases and the ids it frees (none listed: all).
func (n Names) ClaimEntry(subject string, data []byte) (ids []string, tag string, release bool) {
	tok := strings.TrimPrefix(subject, n.ClaimSubject(""))
	if len(data) > 0 {
		ids = strings.Split(string(data), "\n")
	}
	switch {
	case strings.HasPrefix(tok, claimReleaseToken):
		return ids, strings.TrimPrefix(tok, claimReleaseToken), true
	case strings.HasPrefix(tok, claimFreeToken):
		return ids, strings.TrimPrefix(tok, claimFreeToken), true
	case strings.HasPrefix(tok, claimLogToken):
		return ids, strings.TrimPrefix(tok, claimLogToken), false
	}
	return []string{tok}, "", false
}

// DeadLetterSubject is where the workers publish dead letters.
func (n Names) DeadLetterSubject() string { return n.SubjectPrefix + ".deadletter" }

// DiagSubject is where ingest-api and mapper-worker send diagnostics
// reports (pkg/diag).
func (n Names) DiagSubject() string { return n.SubjectPrefix + ".diag" }

// QueryPrefix is where writer-worker answers read requests (any copy: they
// share the queue group QueryQueue).
func (n Names) QueryPrefix() string { return n.SubjectPrefix + ".query." }

// ReplyPrefix starts the subject each ingest-api copy receives outcomes on.
func (n Names) ReplyPrefix() string { return n.SubjectPrefix + ".reply." }

// RateSubject is where ingest-api copies share the readings they granted
// each device, so that a device is held to its rate across them.
func (n Names) RateSubject() string { return n.SubjectPrefix + ".ratelimit" }

// AuditSubject is where ingest-api records workspace changes.
func (n Names) AuditSubject() string { return n.SubjectPrefix + ".audit" }

// QueryQueue is the queue group of the read queries.
const QueryQueue = "writer"

// validPrefix reports whether s makes valid subjects, stream and bucket
// names.
func validPrefix(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || strings.IndexFunc(tok, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			return false
		}
	}
	return true
}

// EnsureStreams creates the shared streams that are missing, all at once:
// in a cluster each creation waits for its stream's leader election. Every
// program calls it at start (Open), so the order in which they start does
// not matter; an existing stream keeps its limits (ensure.go), and each
// limit it has other than cfg's is logged to log.
func ensureStreams(ctx context.Context, js jetstream.JetStream, cfg Config, log *zap.Logger) error {
	cfgs := streamConfigs(cfg)
	errs := make(chan error, len(cfgs))
	for _, sc := range cfgs {
		go func() {
			if _, err := EnsureStream(ctx, js, sc, log); err != nil {
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

// EnsureStreams ensures the streams as Open does, for a test or tool that
// has no logger (differences go unsaid).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	return ensureStreams(ctx, js, cfg, zap.NewNop())
}

// streamConfigs are the streams the programs share.
func streamConfigs(cfg Config) []jetstream.StreamConfig {
	n := cfg.Names()
	stream := func(name, subject, desc string) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: name, Description: desc, Subjects: []string{subject},
			Storage: jetstream.FileStorage, Replicas: cfg.Replicas, Duplicates: PipelineWindow}
	}
	// The two work queues refuse new messages when full (the request is
	// answered 503), never drop accepted ones.
	work := func(sc jetstream.StreamConfig) jetstream.StreamConfig {
		sc.Retention, sc.Discard, sc.MaxAge, sc.MaxBytes = jetstream.WorkQueuePolicy, jetstream.DiscardNew, cfg.StreamMaxAge, cfg.StreamMaxBytes
		return sc
	}
	events := work(stream(n.EventsStream, n.EventsSubject(), "accepted device events, awaiting entity mapping"))
	mapped := work(stream(n.MappedStream, n.MappedSubject(), "mapped device events, awaiting the ClickHouse write"))
	// Dead letters are kept for reading and replay, and when full the
	// oldest go: a full dead-letter stream must not stop ingestion (the
	// dead-letter alert fires long before).
	dead := stream(n.DeadLetterStream, n.DeadLetterSubject(),
		"messages the workers gave up on (permanent failures, delivery limit): list and replay them in the workspace API")
	dead.Retention, dead.Discard, dead.MaxAge, dead.MaxBytes = jetstream.LimitsPolicy, jetstream.DiscardOld, deadLetterMaxAge, cfg.StreamMaxBytes
	// The claims log: an entry holds for the pipeline window (the
	// stream's duplicate window) and is kept twice as long (ClaimsKept);
	// it is released sooner, by a release entry, when its events never
	// entered the pipeline or were dropped. Every ingest-api copy and
	// writer-worker copy follows it (pkg/claimlog; writer-worker/internal/idem,
	// Seen); nothing acks it.
	claims := stream(n.ClaimsStream, n.ClaimSubject("*"),
		"the claims log: one entry per keyed message in the pipeline; a retry with the same Idempotency-Key waits for the first attempt's outcome")
	claims.Retention, claims.Discard, claims.MaxAge, claims.MaxMsgsPerSubject = jetstream.LimitsPolicy, jetstream.DiscardOld, ClaimsKept, 1
	// Diagnostics reports wait for writer-worker; when it is away for long
	// the oldest go, never a device's request.
	diag := stream(n.DiagStream, n.DiagSubject(), "device diagnostics reports (pkg/diag), awaiting the ClickHouse write")
	diag.Retention, diag.Discard, diag.MaxAge, diag.MaxBytes = jetstream.WorkQueuePolicy, jetstream.DiscardOld, diagMaxAge, diagMaxBytes
	return []jetstream.StreamConfig{events, mapped, dead, claims, diag}
}
