// Package event holds the wire types that travel between the programs over
// NATS: the accepted event, the envelope of mapped events, and the batch of
// outcome replies; codec.go is their encoding.
package event

import "github.com/devicehub/eventservice/pkg/outcome"

// Event is what ingest-api publishes once a request is authenticated and
// well-formed. Payload is the request body with accessToken removed: it is
// what the Messages view shows, and it never holds a device token.
type Event struct {
	ID         string
	Serial     string
	ReceivedNs int64
	// ReadingNs is the reading's time (the request's ts, the device's
	// timestamp input, or ReceivedNs); TimeNote says why a time sent was
	// not used ("" when none was refused).
	ReadingNs int64
	TimeNote  string
	// Group names the backlog request (POST /events) the event is one
	// message of ("" for a single reading): a group's values are stored
	// together or not at all.
	Group string
	// Token names the device token the request authenticated with (never
	// the token): the Messages view shows it, so that an operator sees a
	// fleet move from one token to the next.
	Token string
	// Rev is the registry revision of the device record the event was
	// authenticated against; the mapper resolves with that record or newer.
	Rev uint64
	// Reply is the subject of the ingest-api instance waiting for the
	// outcome (JetStream keeps no reply subject of its own); empty when
	// nobody waits.
	Reply string
	// Keyed is set when the request carried an Idempotency-Key: ID is then
	// derived from (serial, key), and a retry carries the same ID.
	Keyed   bool
	Payload []byte
}

// ClaimID is the id the attempts of a keyed request take their one claim on
// (ingest-api/internal/claim): the backlog's Group for its messages, else
// the reading's own ID. Every retry of the request claims the same id.
func ClaimID(id, group string) string {
	if group != "" {
		return group
	}
	return id
}

// EnvelopeCost is what an event counts against an envelope's size limit:
// it travels on beside its mapped values, so twice its payload, plus room
// for ids and names. ingest-api bounds its shared messages by the same
// count, so that one message's events always fit in one envelope.
func EnvelopeCost(e *Event) int { return 2*len(e.Payload) + 256 }

// Value is one reading routed to an entity input.
type Value struct {
	DeviceInput string
	Entity      string
	Input       string
	JSON        []byte
}

// Mapped is one event as mapper-worker hands it to writer-worker, many to an
// envelope. Outcome is Stored when the values are to be written, or
// NoConnections for a raw-message-only record. The writer answers every
// event it receives (at Reply, when someone waits), as pkg/settle decides.
type Mapped struct {
	ID         string
	Serial     string
	ReceivedNs int64
	ReadingNs  int64 // see Event
	TimeNote   string
	Group      string
	Token      string // see Event
	Outcome    outcome.Code
	// MaybeStored is set when an earlier delivery may have carried the
	// event to storage (the mapper saw it more than once, or it is a
	// replay): the writer checks before inserting its values.
	MaybeStored bool
	// Keyed events (see Event.Keyed) are retried after a transient
	// storage failure, and a retry is answered with the first attempt's
	// outcome; they travel in envelopes of their own.
	Keyed bool
	// Replay is set for an event an operator replayed from the dead
	// letters: an earlier attempt was answered "failed to store", and this
	// one may store it.
	Replay  bool
	Reply   string
	Payload []byte
	Values  []Value
}

// Reply is the outcome of one event, sent back to the waiting instance.
type Reply struct {
	ID     string
	Code   outcome.Code
	Detail string
}
