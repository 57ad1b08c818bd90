// Package event holds the wire types that travel between the programs over
// NATS: the accepted event, the envelope of mapped events, and the batch of
// outcome replies; codec.go is their encoding.
package event

import (
	"github.com/nats-io/nats.go"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Event is what ingest-api publishes once a request is authenticated and
// well-formed. Payload is the request body with accessToken removed: it is
// what the Messages view shows, and it never holds a device token.
type Event struct {
	ID         string
	Serial     string
	ReceivedNs int64
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
// envelope. Outcome is Stored when the values are to be written and the
// request answered after the insert, or NoConnections for a raw-message-only
// record whose request the mapper answers itself.
type Mapped struct {
	ID         string
	Serial     string
	ReceivedNs int64
	Outcome    outcome.Code
	// MaybeStored is set when the event was delivered to the mapper more
	// than once: an earlier envelope may have carried it to storage, so
	// the writer checks before inserting its values.
	MaybeStored bool
	// Keyed events (see Event.Keyed) are answered by the writer whatever
	// their outcome, after it checked for an earlier attempt's outcome;
	// they travel in envelopes of their own.
	Keyed   bool
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

// Replies gathers outcomes by the subject they go to, so that a batch's
// answers cost one message per waiting instance rather than one per event.
type Replies struct {
	by map[string][]Reply
}

// Add queues r for subject; an empty subject means nobody waits.
func (rs *Replies) Add(subject string, r Reply) {
	if subject == "" {
		return
	}
	if rs.by == nil {
		rs.by = make(map[string][]Reply)
	}
	rs.by[subject] = append(rs.by[subject], r)
}

// Send publishes every queued group (core NATS: an instance that is gone
// simply misses its answers) and empties rs.
func (rs *Replies) Send(nc *nats.Conn) error {
	var first error
	for subject, group := range rs.by {
		if err := nc.Publish(subject, AppendReplies(nil, group)); err != nil && first == nil {
			first = err
		}
	}
	clear(rs.by)
	return first
}
