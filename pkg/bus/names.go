package bus

import "strings"

// Names are the streams, consumers and subjects the programs share; every
// copy of every program must use the same ones. Two deployments can share a
// NATS account by giving each its own. Events carry the serial in the body,
// not in the subject: serials may hold characters a subject cannot.
type Names struct {
	EventsStream   string // accepted events, consumed by mapper-worker
	MappedStream   string // envelopes of mapped events, consumed by writer-worker
	MapperConsumer string // durable consumer of EventsStream
	WriterConsumer string // durable consumer of MappedStream
	// DeadLetterStream keeps the messages either worker gave up on, for
	// operators to list and replay.
	DeadLetterStream string
	// ClaimsStream holds one message per keyed event in the pipeline, on
	// <prefix>.claims.<event id>: the claim that keeps a retry with the
	// same Idempotency-Key out while the first attempt is on its way.
	ClaimsStream string
	// SubjectPrefix starts every subject: <prefix>.events.in,
	// <prefix>.mapped.in, <prefix>.claims.<id>, <prefix>.query.<kind>,
	// <prefix>.reply.<instance>.
	SubjectPrefix string
}

// DefaultNames are the names when none are configured.
var DefaultNames = Names{
	EventsStream: "DEVICE_EVENTS", MappedStream: "DEVICE_MAPPED",
	MapperConsumer: "mapper", WriterConsumer: "writer", SubjectPrefix: "devices",
	DeadLetterStream: "DEVICE_DEADLETTER", ClaimsStream: "DEVICE_KEY_CLAIMS",
}

// EventsSubject is where ingest-api publishes accepted events.
func (n Names) EventsSubject() string { return n.SubjectPrefix + ".events.in" }

// MappedSubject is where mapper-worker publishes envelopes.
func (n Names) MappedSubject() string { return n.SubjectPrefix + ".mapped.in" }

// ClaimSubject is the subject of the claim on a keyed event's id (a UUID:
// one subject token).
func (n Names) ClaimSubject(id string) string { return n.SubjectPrefix + ".claims." + id }

// DeadLetterSubject is where the workers publish dead letters.
func (n Names) DeadLetterSubject() string { return n.SubjectPrefix + ".deadletter" }

// QueryPrefix is where writer-worker answers read requests (any copy: they
// share the queue group QueryQueue).
func (n Names) QueryPrefix() string { return n.SubjectPrefix + ".query." }

// ReplyPrefix starts the subject each ingest-api copy receives outcomes on.
func (n Names) ReplyPrefix() string { return n.SubjectPrefix + ".reply." }

// RateSubject is where ingest-api copies share the readings they granted
// each device, so that a device is held to its rate across them.
func (n Names) RateSubject() string { return n.SubjectPrefix + ".ratelimit" }

// AuditStream holds the workspace's audit trail (ingest-api's alone),
// named after the events stream so that deployments sharing an account
// keep theirs apart.
func (n Names) AuditStream() string { return n.EventsStream + "_AUDIT" }

// AuditSubject is where ingest-api records workspace changes.
func (n Names) AuditSubject() string { return n.SubjectPrefix + ".audit" }

// QueryQueue is the queue group of the read queries.
const QueryQueue = "writer"

// distinctStreams reports whether the stream names are valid and different.
func (n Names) distinctStreams() bool {
	seen := make(map[string]bool, 4)
	for _, s := range []string{n.EventsStream, n.MappedStream, n.DeadLetterStream, n.ClaimsStream} {
		if !validName(s) || seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}

func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>")
}

func validPrefix(s string) bool {
	if s == "" || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.ContainsAny(s, " \t\r\n*>") {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}
