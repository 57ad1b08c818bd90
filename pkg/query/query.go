// Package query is the request-reply contract between ingest-api's workspace
// endpoints and writer-worker, the one program with a ClickHouse driver.
package query

import (
	"encoding/json"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Subjects, under bus.Names.QueryPrefix.
const (
	Ping     = "ping"
	Messages = "messages"
	Latest   = "latest"
	Series   = "series"
	// Outcome asks for the outcomes earlier attempts of keyed events were
	// answered with (see the Idempotency-Key guarantee).
	Outcome = "outcome"
)

// Limits on what one query returns.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Request covers all read queries; each uses the fields it needs.
type Request struct {
	Serial string `json:"serial,omitempty"`
	Entity string `json:"entity,omitempty"`
	Input  string `json:"input,omitempty"`
	FromMs int64  `json:"fromMs,omitempty"`
	ToMs   int64  `json:"toMs,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// EventIDs are the keyed events an Outcome query asks about.
	EventIDs []string `json:"eventIds,omitempty"`
}

// Message is one row of a device's Messages view.
type Message struct {
	EventID    string `json:"eventId"`
	ReceivedAt string `json:"receivedAt"`
	// ReadingTime is the reading's time (see the input values); TimeNote
	// says why a time the device sent was not used.
	ReadingTime string          `json:"readingTime"`
	TimeNote    string          `json:"timeNote,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	Outcome     string          `json:"outcome"`
}

// Point is one stored reading of an entity input.
type Point struct {
	// TS is the reading time, ReceivedAt when ingest-api received it.
	TS         string          `json:"ts"`
	Value      json.RawMessage `json:"value"`
	Serial     string          `json:"serial,omitempty"`
	ReceivedAt string          `json:"receivedAt,omitempty"`
}

// Response is the writer's answer. Error is set when the query failed.
type Response struct {
	Error    string    `json:"error,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	Points   []Point   `json:"points,omitempty"`
	// Outcomes holds, for an Outcome query, the answered events' outcomes.
	Outcomes map[string]outcome.Code `json:"outcomes,omitempty"`
}

// TimeLayout renders timestamps: RFC 3339 in UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"
