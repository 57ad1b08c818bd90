package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// The wire encoding between the programs: length-prefixed fields behind a
// version byte. It is several times cheaper than JSON to write and read,
// which matters because every event crosses it three times.
//
// Each of the three formats has its own version, as release 1.0.0 writes
// it. A release that changes a format gives it a new version and keeps
// reading the previous release's, so that a rolling upgrade works:
// testdata/<release>/ holds messages each release wrote, and
// TestReadsEveryReleasesFormats reads them.
const (
	eventsFormat   byte = 6 // events messages: ingest-api -> mapper-worker
	envelopeFormat byte = 5 // envelopes: mapper-worker -> writer-worker
	repliesFormat  byte = 3 // outcomes: either worker -> ingest-api
)

// ErrMalformed is returned for bytes that are not a message of this package.
var ErrMalformed = errors.New("malformed wire message")

type writer struct{ b []byte }

func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }
func (w *writer) bytes(p []byte)   { w.uvarint(uint64(len(p))); w.b = append(w.b, p...) }
func (w *writer) byte(c byte)      { w.b = append(w.b, c) }
func (w *writer) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = ErrMalformed
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	r.skip(n)
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	r.skip(n)
	return v
}

// skip moves past a varint of n bytes (as binary.Uvarint and Varint report
// it). Only the shortest form is valid, so that each value has one
// encoding.
func (r *reader) skip(n int) {
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail()
		return
	}
	r.b = r.b[n:]
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) str() string { return string(r.bytes()) }

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// count reads a element count, refusing counts the remaining bytes cannot
// hold (each element takes at least min bytes), so a hostile count cannot
// make the reader allocate.
func (r *reader) count(min int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/min) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) version(want byte) {
	if r.byte() != want {
		r.fail()
	}
}

func (r *reader) done(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = ErrMalformed
	}
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", what, r.err)
	}
	return nil
}

// Messages on the events stream carry one or more events: ingest-api
// gathers the events of concurrent requests into one message, which costs
// NATS and the mapper one message instead of one per event.

// AppendEvent appends e to the events message b; an empty b starts a new
// message.
func AppendEvent(b []byte, e *Event) []byte {
	w := writer{b: b}
	if len(w.b) == 0 {
		w.byte(eventsFormat)
	}
	w.str(e.ID)
	w.str(e.Serial)
	w.uvarint(uint64(e.ReceivedNs))
	w.varint(e.ReadingNs)
	w.str(e.TimeNote)
	w.str(e.Group)
	w.str(e.Token)
	w.uvarint(e.Rev)
	w.str(e.Reply)
	w.byte(boolByte(e.Keyed))
	w.bytes(e.Payload)
	return w.b
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// flag reads a byte that must be 0 or 1, so that each value has one encoding.
func (r *reader) flag() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail()
	return false
}

// DecodeEvents decodes an events message (at least one event); Payload
// fields alias data.
func DecodeEvents(data []byte) ([]Event, error) {
	r := reader{b: data}
	r.version(eventsFormat)
	var es []Event
	for r.err == nil && (len(r.b) > 0 || len(es) == 0) {
		es = append(es, r.event())
	}
	return es, r.done("events")
}

func (r *reader) event() Event {
	e := Event{ID: r.str(), Serial: r.str(), ReceivedNs: int64(r.uvarint())}
	e.ReadingNs, e.TimeNote, e.Group, e.Token = r.varint(), r.str(), r.str(), r.str()
	e.Rev, e.Reply = r.uvarint(), r.str()
	e.Keyed = r.flag()
	e.Payload = r.bytes()
	return e
}

func (w *writer) mapped(m *Mapped) {
	w.str(m.ID)
	w.str(m.Serial)
	w.uvarint(uint64(m.ReceivedNs))
	w.varint(m.ReadingNs)
	w.str(m.TimeNote)
	w.str(m.Group)
	w.str(m.Token)
	w.byte(byte(m.Outcome))
	w.byte(boolByte(m.MaybeStored) | boolByte(m.Keyed)<<1 | boolByte(m.Replay)<<2)
	w.str(m.Reply)
	w.bytes(m.Payload)
	w.uvarint(uint64(len(m.Values)))
	for i := range m.Values {
		v := &m.Values[i]
		w.str(v.DeviceInput)
		w.str(v.Entity)
		w.str(v.Input)
		w.bytes(v.JSON)
	}
}

func (r *reader) mapped() Mapped {
	m := Mapped{ID: r.str(), Serial: r.str(), ReceivedNs: int64(r.uvarint())}
	m.ReadingNs, m.TimeNote, m.Group, m.Token = r.varint(), r.str(), r.str(), r.str()
	m.Outcome = outcome.Code(r.byte())
	flags := r.byte()
	m.MaybeStored, m.Keyed, m.Replay = flags&1 != 0, flags&2 != 0, flags&4 != 0
	if flags > 7 {
		r.fail()
	}
	m.Reply = r.str()
	m.Payload = r.bytes()
	if n := r.count(4); n > 0 {
		m.Values = make([]Value, n)
		for i := range m.Values {
			m.Values[i] = Value{DeviceInput: r.str(), Entity: r.str(), Input: r.str(), JSON: r.bytes()}
		}
	}
	if !outcome.Valid(m.Outcome) {
		r.fail()
	}
	return m
}

// AppendEnvelope appends the encoding of a batch of mapped events to b.
func AppendEnvelope(b []byte, ms []Mapped) []byte {
	// Sized once: growing by doubling copied every payload several times.
	size := 16
	for i := range ms {
		m := &ms[i]
		size += 48 + len(m.ID) + len(m.Serial) + len(m.TimeNote) + len(m.Group) + len(m.Token) + len(m.Reply) + len(m.Payload)
		for j := range m.Values {
			v := &m.Values[j]
			size += 16 + len(v.DeviceInput) + len(v.Entity) + len(v.Input) + len(v.JSON)
		}
	}
	w := writer{b: slices.Grow(b, size)}
	w.byte(envelopeFormat)
	w.uvarint(uint64(len(ms)))
	for i := range ms {
		w.mapped(&ms[i])
	}
	return w.b
}

// DecodeEnvelope decodes a batch of mapped events; byte fields alias data.
func DecodeEnvelope(data []byte) ([]Mapped, error) {
	r := reader{b: data}
	r.version(envelopeFormat)
	n := r.count(8)
	ms := make([]Mapped, 0, n)
	for range n {
		ms = append(ms, r.mapped())
	}
	return ms, r.done("envelope")
}

// AppendReplies appends the encoding of a batch of outcomes to b.
func AppendReplies(b []byte, rs []Reply) []byte {
	w := writer{b: b}
	w.byte(repliesFormat)
	w.uvarint(uint64(len(rs)))
	for i := range rs {
		w.str(rs[i].ID)
		w.byte(byte(rs[i].Code))
		w.str(rs[i].Detail)
	}
	return w.b
}

// DecodeReplies decodes a batch of outcomes.
func DecodeReplies(data []byte) ([]Reply, error) {
	r := reader{b: data}
	r.version(repliesFormat)
	n := r.count(3)
	rs := make([]Reply, 0, n)
	for range n {
		rs = append(rs, Reply{ID: r.str(), Code: outcome.Code(r.byte()), Detail: r.str()})
	}
	return rs, r.done("replies")
}
