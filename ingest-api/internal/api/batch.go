package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/devicehub/eventservice/pkg/jsonobj"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// batchRequest is a backlog request (POST /api/v1/deviceapi/events) after
// the checks that need no registry.
type batchRequest struct {
	Serial    string
	BodyToken string
	Messages  []batchMessage
}

// batchMessage is one message of a backlog. Code is Stored when it is
// well-formed (what happens to it is decided later), or why it is rejected
// on its own (InvalidFormat, InvalidData).
type batchMessage struct {
	Code outcome.Code
	TS   []byte // the message's ts as sent (nil: absent)
	Data []byte // its data object as sent
	// Payload is what the Messages view shows: the message with the
	// device's serial, without any accessToken.
	Payload []byte
}

// parseBatch checks a backlog body in the spec's order up to the registry
// checks: format, serial, token, then the messages array (present, an
// array, not empty, at most max). A rejection's detail is its error text
// where the outcome table leaves it open.
func parseBatch(body []byte, headerToken string, max int) (batchRequest, outcome.Code, string) {
	var buf [8]jsonobj.Member
	ms, serial, bodyToken, code := head(body, buf[:0], headerToken)
	if code != outcome.Stored {
		return batchRequest{Serial: serial}, code, ""
	}
	r := batchRequest{Serial: serial, BodyToken: bodyToken}
	items := jsonobj.Elements(member(ms, "messages"))
	if len(items) == 0 {
		return batchRequest{Serial: serial}, outcome.EmptyMessages, ""
	}
	if len(items) > max {
		return batchRequest{Serial: serial}, outcome.TooManyMessages, fmt.Sprintf("Too many messages in one request (at most %d)", max)
	}
	quoted, _ := json.Marshal(r.Serial)
	r.Messages = make([]batchMessage, len(items))
	for i, item := range items {
		r.Messages[i] = parseBatchMessage(item, quoted)
	}
	return r, outcome.Stored, ""
}

// parseBatchMessage reads one message: an object whose data is an object
// (validData), naming none of the members read twice.
func parseBatchMessage(item, quotedSerial []byte) batchMessage {
	var buf [4]jsonobj.Member
	ms, ok := jsonobj.Members(item, buf[:0])
	if !ok || jsonobj.Repeats(ms, readMembers...) {
		return batchMessage{Code: outcome.InvalidFormat}
	}
	m := batchMessage{Code: outcome.Stored, TS: member(ms, "ts"), Data: member(ms, "data")}
	if !validData(m.Data) {
		m.Code = outcome.InvalidData
	}
	var out bytes.Buffer
	out.Grow(len(item) + len(quotedSerial) + 12)
	out.WriteString(`{"serial":`)
	out.Write(quotedSerial)
	writeMembers(&out, ms, "accessToken", "serial")
	out.WriteByte('}')
	m.Payload = out.Bytes()
	return m
}
