// Package event holds the wire types that travel between the programs over
// NATS: the accepted event, the mapped event and the outcome reply.
package event

import (
	"encoding/json"

	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/nats-io/nats.go"
)

// HeaderReply carries the core-NATS subject where the outcome of an event is
// awaited. JetStream does not keep a message's reply subject, so it travels in
// a header of ours. Absent when nobody waits (a replay, or a raw-only record).
const HeaderReply = "Dev-Reply"

// Event is what ingest-api publishes once a request is authenticated and
// well-formed. Payload is the request body with accessToken removed: it is
// what the Messages view shows, and it never holds a device token.
type Event struct {
	ID         string `json:"id"`
	Serial     string `json:"serial"`
	ReceivedNs int64  `json:"ts"`
	// Rev is the registry revision of the device record the event was
	// authenticated against; the mapper resolves with that record or newer.
	Rev     uint64          `json:"rev"`
	Payload json.RawMessage `json:"payload"`
}

// Value is one reading routed to an entity input.
type Value struct {
	DeviceInput string          `json:"di"`
	Entity      string          `json:"e"`
	Input       string          `json:"i"`
	JSON        json.RawMessage `json:"v"`
}

// Mapped is what mapper-worker hands to writer-worker. Outcome is Stored when
// the values are to be written and the waiting request answered after the
// insert, or NoConnections for a raw-message-only record whose request the
// mapper has already answered.
type Mapped struct {
	ID         string          `json:"id"`
	Serial     string          `json:"serial"`
	ReceivedNs int64           `json:"ts"`
	Payload    json.RawMessage `json:"payload"`
	Outcome    outcome.Code    `json:"outcome"`
	Values     []Value         `json:"values,omitempty"`
}

// Reply is the outcome sent back to the waiting ingest-api instance.
type Reply struct {
	Code   outcome.Code `json:"code"`
	Detail string       `json:"detail,omitempty"`
}

// EncodeReply renders r; it cannot fail for this type.
func EncodeReply(r Reply) []byte {
	b, _ := json.Marshal(r)
	return b
}

// Answer sends r to the request waiting on subject; an empty subject means
// nobody waits. Core NATS: if the waiter is gone, the answer is dropped.
func Answer(nc *nats.Conn, subject string, r Reply) error {
	if subject == "" {
		return nil
	}
	return nc.Publish(subject, EncodeReply(r))
}
