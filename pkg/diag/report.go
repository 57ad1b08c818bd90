// Package diag counts what became of each device's requests, so that an
// operator can answer "why isn't my data showing?": every answer by kind
// (rejections that never reach storage included), a sample of the last
// rejections with their texts and source address, and the keys a device
// sends that match no connected input. ingest-api and mapper-worker count
// in a Tally, which sends a Report a few times a minute; writer-worker
// stores the reports (docs/workspace-api.md, "Diagnostics").
package diag

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Format is the version of a Report's encoding (JSON); a reader refuses
// what it does not know.
const Format = 1

// Report is what one process counted in one interval, by minute.
type Report struct {
	Format int `json:"f"`
	// Minute is the start of the minute (Unix seconds) every count of the
	// report falls in.
	Minute     int64       `json:"m"`
	Counts     []Count     `json:"c,omitempty"`
	Seen       []Seen      `json:"s,omitempty"`
	Rejections []Rejection `json:"r,omitempty"`
	Keys       []Key       `json:"k,omitempty"`
}

// Count is how many requests and readings of a serial were answered with
// one kind. Serial is "" for requests that named no serial, and for
// serials not provisioned beyond the ones a Tally tracks.
type Count struct {
	Serial   string `json:"s"`
	Kind     string `json:"k"`
	Requests uint64 `json:"q,omitempty"`
	Readings uint64 `json:"n,omitempty"`
}

// Seen is a serial's latest authenticated request in the interval.
type Seen struct {
	Serial string `json:"s"`
	LastNs int64  `json:"t"`
	Kind   string `json:"k"`
}

// Rejection is one refused request: when, the answer's texts, and the
// address it came from.
type Rejection struct {
	Serial  string `json:"s"`
	AtNs    int64  `json:"t"`
	Kind    string `json:"k"`
	Message string `json:"m"`
	Error   string `json:"e,omitempty"`
	Source  string `json:"a,omitempty"`
}

// Key is a data key of a device's readings that matched no connected
// input: how often, and its latest value (JSON text, clipped).
type Key struct {
	Serial    string `json:"s"`
	Key       string `json:"k"`
	Count     uint64 `json:"n"`
	LastNs    int64  `json:"t"`
	LastValue string `json:"v"`
}

// KindMQTT is the kind of a request refused because its device is not of
// connection type API: answered as a wrong token, told apart here.
const KindMQTT = "mqtt_device"

// KindOf is the diagnostics' kind of an answer: the outcome's name.
func KindOf(c outcome.Code) string { return c.String() }

// Rejected reports whether a kind is a refusal (not stored, not partly).
func Rejected(kind string) bool {
	return kind != outcome.Stored.String() && kind != outcome.PartlyStored.String()
}

// Text bounds on what a report carries of a client's text.
const (
	maxSerial = 128
	maxKey    = 128
	maxValue  = 256
	maxText   = 512
)

// Clip cuts client text to n bytes of valid UTF-8, saying how long it was.
func Clip(s string, n int) string {
	if len(s) <= n {
		if utf8.ValidString(s) {
			return s
		}
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ToValidUTF8(s[:n], "") + "...(" + strconv.Itoa(len(s)) + " bytes)"
}
