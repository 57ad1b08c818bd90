// Package query is the request-reply contract between ingest-api's workspace
// endpoints and writer-worker, the one program with a ClickHouse driver.
package query

import (
	"encoding/json"
	"time"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Subjects, under bus.Names.QueryPrefix.
const (
	Ping     = "ping"
	Messages = "messages"
	Latest   = "latest"
	Series   = "series"
	// Buckets is a series aggregated into buckets of StepMs.
	Buckets = "buckets"
	// LastSeen asks for the receive time of each of Serials' newest
	// message; LatestOf for the latest value of each of Pairs.
	LastSeen = "lastseen"
	LatestOf = "latestof"
	// Outcome asks for the outcomes earlier attempts of keyed events were
	// answered with (see the Idempotency-Key guarantee).
	Outcome = "outcome"
)

// Limits on what one query returns.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
	// MaxBuckets bounds an aggregated series, MaxSerials a LastSeen
	// query and MaxPairs a LatestOf query.
	MaxBuckets = 10000
	MaxSerials = 1000
	MaxPairs   = 10000
	// MaxBytes bounds one answer's values (payloads, points, buckets'
	// last values), RowBytes counted for each row besides its value: a
	// page of large values is short and says so, a value over its share
	// is left out and named by its size. No read holds more in
	// writer-worker, or in one NATS reply. See Budget.
	MaxBytes = 4 << 20
	RowBytes = 160
)

// Budget is the bytes one answer may hold on a connection whose messages
// hold at most maxPayload: MaxBytes, or half the max payload when that is
// less (the other half for the JSON around the values).
func Budget(maxPayload int64) int {
	return int(min(MaxBytes, maxPayload/2))
}

// Request covers all read queries; each uses the fields it needs.
type Request struct {
	Serial string `json:"serial,omitempty"`
	Entity string `json:"entity,omitempty"`
	Input  string `json:"input,omitempty"`
	FromMs int64  `json:"fromMs,omitempty"`
	ToMs   int64  `json:"toMs,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// BeforeNs pages a Messages query: messages received before it.
	BeforeNs int64 `json:"beforeNs,omitempty"`
	// EventIDs are the keyed events an Outcome query asks about.
	EventIDs []string `json:"eventIds,omitempty"`
	// StepMs is a Buckets query's bucket width.
	StepMs  int64         `json:"stepMs,omitempty"`
	Serials []string      `json:"serials,omitempty"`
	Pairs   []EntityInput `json:"pairs,omitempty"`
}

// EntityInput names one input of an entity.
type EntityInput struct {
	Entity string `json:"entity"`
	Input  string `json:"input"`
}

// Bucket is one bucket of an aggregated series: the readings with reading
// times in [TS, TS+step). Min, Max and Avg cover the numbers and booleans
// (true = 1) among them and are absent when there are none; Last is the
// value with the greatest reading time.
type Bucket struct {
	TS    string          `json:"ts"`
	Count uint64          `json:"count"`
	Min   *float64        `json:"min,omitempty"`
	Max   *float64        `json:"max,omitempty"`
	Avg   *float64        `json:"avg,omitempty"`
	Last  json.RawMessage `json:"last"`
	// LastBytes is the size of a Last left out (null) for its size.
	LastBytes int `json:"lastBytes,omitempty"`
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
	// Token names the device token the message was sent with ("" for
	// messages kept before tokens had names).
	Token string `json:"token,omitempty"`
}

// Point is one stored reading of an entity input.
type Point struct {
	// TS is the reading time, ReceivedAt when ingest-api received it.
	TS         string          `json:"ts"`
	Value      json.RawMessage `json:"value"`
	Entity     string          `json:"entity,omitempty"`
	Input      string          `json:"input,omitempty"`
	Serial     string          `json:"serial,omitempty"`
	ReceivedAt string          `json:"receivedAt,omitempty"`
	// ValueBytes is the size of a Value left out (null) for its size.
	ValueBytes int `json:"valueBytes,omitempty"`
}

// Response is the writer's answer. Error is set when the query failed.
type Response struct {
	Error    string    `json:"error,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// NextNs is the BeforeNs of the next page of messages (0: none).
	NextNs int64 `json:"nextNs,omitempty"`
	// Truncated says the answer is not whole: a series page that stopped
	// at its limit or its bytes (NextMs is the FromMs of the page after),
	// or values left out for their size (ValueBytes, LastBytes).
	Truncated bool     `json:"truncated,omitempty"`
	NextMs    int64    `json:"nextMs,omitempty"`
	Points    []Point  `json:"points,omitempty"`
	Buckets   []Bucket `json:"buckets,omitempty"`
	// LastSeen maps a serial to its newest message's receive time.
	LastSeen map[string]string `json:"lastSeen,omitempty"`
	// Outcomes holds, for an Outcome query, the answered events' outcomes.
	Outcomes    map[string]outcome.Code `json:"outcomes,omitempty"`
	Diagnostics *DeviceDiagnostics      `json:"diagnostics,omitempty"`
	Fleet       *FleetView              `json:"fleet,omitempty"`
}

// TimeLayout renders timestamps: RFC 3339 in UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatNs renders epoch nanoseconds in TimeLayout.
func FormatNs(ns int64) string { return time.Unix(0, ns).UTC().Format(TimeLayout) }
