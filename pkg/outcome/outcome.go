// Package outcome is the one table of results the service can report: the
// spec's section 7 texts, the HTTP status that goes with each, and whether a
// client may retry. Every program speaks in these codes; only the HTTP edge
// turns them into a response.
package outcome

import (
	"strconv"
	"strings"
)

// Code identifies one row of the outcome table. Codes travel between
// processes, so existing values must never be renumbered.
type Code uint8

const (
	Stored           Code = 0
	InvalidFormat    Code = 1
	MissingSerial    Code = 2
	MissingToken     Code = 3
	InvalidData      Code = 4
	DeviceNotFound   Code = 5
	InvalidToken     Code = 6
	NoConnections    Code = 7
	StorageFailed    Code = 8
	ProcessingFailed Code = 9
	PayloadTooLarge  Code = 10
	Overloaded       Code = 11
	Unauthorized     Code = 12
	RouteNotFound    Code = 13
	MethodNotAllowed Code = 14
	BadRequest       Code = 15
	NotFound         Code = 16
	Internal         Code = 17
	RateLimited      Code = 18
	// The backlog endpoint's own answers (POST /api/v1/deviceapi/events).
	EmptyMessages   Code = 19
	TooManyMessages Code = 20
	PartlyStored    Code = 21
	// The front door's own answers to what a stranger may not cost.
	BodyTimeout    Code = 22
	SourceRefused  Code = 23
	TooManyConns   Code = 24
	ConnsExhausted Code = 25
	// The workspace API's answers to changes it may not make.
	Conflict  Code = 26
	Forbidden Code = 27
)

// Row is one line of the table: the code's name (logs, metric labels), its
// HTTP status, the spec's message, and the error text. ErrorText may hold
// "<serial>", replaced by the serial that was sent; an empty ErrorText
// means the detail is supplied at the time of failure (the spec's
// "underlying error" rows).
type Row struct {
	Name      string
	Status    int
	Message   string
	ErrorText string
	// RetryAfter is set for outcomes a client should retry; the HTTP edge
	// sends it as a Retry-After header.
	RetryAfter int
}

var table = [...]Row{
	Stored:           {"stored", 200, "Message processed and data stored successfully", "", 0},
	InvalidFormat:    {"invalid_format", 400, "Invalid message format", "Message must be a valid JSON object", 0},
	MissingSerial:    {"missing_serial", 400, "Missing serial number", "Device serial number is required", 0},
	MissingToken:     {"missing_token", 401, "Missing access token", "Device access token is required (either in data or as Bearer token)", 0},
	InvalidData:      {"invalid_data", 400, "Invalid data format", "Message data must be a valid object", 0},
	DeviceNotFound:   {"device_not_found", 404, "Device not found", "Device with serial <serial> not found", 0},
	InvalidToken:     {"invalid_token", 401, "Invalid access token", "Invalid access token for device with serial <serial>", 0},
	NoConnections:    {"no_connections", 422, "No connections configured", "No connections found for this device", 0},
	StorageFailed:    {"storage_failed", 503, "Message processed but failed to store data", "", 1},
	ProcessingFailed: {"processing_failed", 503, "Failed to process message", "", 1},
	PayloadTooLarge:  {"payload_too_large", 413, "Payload too large", "Request body exceeds the limit", 0},
	Overloaded:       {"overloaded", 503, "Failed to process message", "", 1},
	Unauthorized:     {"unauthorized", 401, "Unauthorized", "A valid admin token is required", 0},
	RouteNotFound:    {"route_not_found", 404, "Not found", "No such endpoint", 0},
	MethodNotAllowed: {"method_not_allowed", 405, "Method not allowed", "Method not allowed on this endpoint", 0},
	BadRequest:       {"bad_request", 400, "Bad request", "", 0},
	NotFound:         {"not_found", 404, "Not found", "", 0},
	Internal:         {"internal", 500, "Failed to process message", "", 0},
	RateLimited:      {"rate_limited", 429, "Rate limit exceeded", "Too many requests for device with serial <serial>", 1},
	EmptyMessages:    {"empty_messages", 400, "Invalid data format", "Messages must be a non-empty array", 0},
	TooManyMessages:  {"too_many_messages", 413, "Payload too large", "", 0},
	PartlyStored:     {"partly_stored", 200, "Some messages were not stored", "", 0},
	BodyTimeout:      {"body_timeout", 408, "Request timeout", "The request body did not arrive in time", 0},
	SourceRefused:    {"source_refused", 429, "Rate limit exceeded", "Too many failed authentications from this address", 60},
	TooManyConns:     {"too_many_conns", 429, "Rate limit exceeded", "Too many connections from this address", 10},
	ConnsExhausted:   {"conns_exhausted", 503, "Failed to process message", "Too many connections, retry later", 1},
	Conflict:         {"conflict", 409, "Conflict", "", 0},
	Forbidden:        {"forbidden", 403, "Forbidden", "", 0},
}

// Lookup returns the row for c. Unknown codes (from a newer peer) read as an
// unexpected failure rather than a success.
func Lookup(c Code) Row {
	if int(c) < len(table) {
		return table[c]
	}
	return table[Internal]
}

// NumCodes is the number of rows: codes 0 to NumCodes()-1 are valid.
func NumCodes() int { return len(table) }

// Valid reports whether c is a row of this table.
func Valid(c Code) bool { return int(c) < len(table) }

// Error returns the error text for c: the table's text with the serial
// filled in, or detail when the row takes its text from the failure.
func (r Row) Error(serial, detail string) string {
	if r.ErrorText == "" {
		if detail == "" {
			return "unexpected error"
		}
		return detail
	}
	if strings.Contains(r.ErrorText, "<serial>") {
		return strings.ReplaceAll(r.ErrorText, "<serial>", serial)
	}
	return r.ErrorText
}

// String names a code for logs and metric labels.
func (c Code) String() string {
	if !Valid(c) {
		return "code_" + strconv.Itoa(int(c))
	}
	return table[c].Name
}
