package event

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/devicehub/eventservice/pkg/outcome"
)

func TestRoundTrips(t *testing.T) {
	ev := Event{ID: "id-1", Serial: "sé rial", ReceivedNs: 1795322239123456789, ReadingNs: 1795322230000000000, TimeNote: "", Rev: 42, Reply: "devices.reply.x", Keyed: true, Payload: []byte(`{"serial":"s","data":{"a":1}}`)}
	ev2 := Event{ID: "id-2", Serial: "s2", ReceivedNs: 1, ReadingNs: 1, TimeNote: "ts is not a time: stored at receive time", Group: "g1", Token: "fw-2", Reply: "devices.reply.y", Payload: []byte(`{}`)}
	got, err := DecodeEvents(AppendEvent(AppendEvent(nil, &ev), &ev2))
	if err != nil || !reflect.DeepEqual(got, []Event{ev, ev2}) {
		t.Fatalf("events round trip: %+v %v", got, err)
	}
	ms := []Mapped{
		{ID: "a", Serial: "s", ReceivedNs: 7, ReadingNs: -3, TimeNote: "n", Group: "g", Token: "token-1", Outcome: outcome.Stored, MaybeStored: true, Reply: "r", Payload: []byte(`{}`),
			Values: []Value{{DeviceInput: "t", Entity: "e", Input: "i", JSON: []byte(`21.5`)}, {DeviceInput: "u", Entity: "e", Input: "j", JSON: []byte(`"x"`)}}},
		{ID: "b", Serial: "s2", ReceivedNs: 8, Outcome: outcome.NoConnections, Keyed: true, Replay: true, Payload: []byte(`{"x":null}`)},
		{ID: "c", Serial: "s3", ReceivedNs: 9, Outcome: outcome.Stored, MaybeStored: true, Keyed: true, Payload: []byte(`{}`)},
	}
	back, err := DecodeEnvelope(AppendEnvelope(nil, ms))
	if err != nil || !reflect.DeepEqual(back, ms) {
		t.Fatalf("envelope round trip: %+v %v", back, err)
	}
	rs := []Reply{{ID: "a", Code: outcome.Stored}, {ID: "b", Code: outcome.StorageFailed, Detail: "storage error: x"}}
	rback, err := DecodeReplies(AppendReplies(nil, rs))
	if err != nil || !reflect.DeepEqual(rback, rs) {
		t.Fatalf("replies round trip: %+v %v", rback, err)
	}
}

func TestTruncatedAndForeignInputIsRefused(t *testing.T) {
	full := AppendEnvelope(nil, []Mapped{{ID: "a", Serial: "s", Outcome: outcome.Stored, Values: []Value{{JSON: []byte("1")}}}})
	for i := range len(full) {
		if _, err := DecodeEnvelope(full[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes decoded: %v", i, err)
		}
	}
	if _, err := DecodeEnvelope(append(bytes.Clone(full), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatal("trailing byte accepted")
	}
	if _, err := DecodeEvents([]byte(`{"id":"json"}`)); !errors.Is(err, ErrMalformed) {
		t.Fatal("JSON accepted as an event")
	}
	if _, err := DecodeEvents([]byte{eventsVersion}); !errors.Is(err, ErrMalformed) {
		t.Fatal("an events message without events accepted")
	}
	events := AppendEvent(nil, &Event{ID: "a", Serial: "s", Payload: []byte("{}")})
	first := len(events) // a whole message of one event
	events = AppendEvent(events, &Event{ID: "b", Serial: "s", Payload: []byte("{}")})
	for i := range len(events) {
		if _, err := DecodeEvents(events[:i]); i != first && !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes of an events message decoded: %v", i, err)
		}
	}
	bad := AppendEnvelope(nil, []Mapped{{ID: "a", Outcome: 200}})
	if _, err := DecodeEnvelope(bad); !errors.Is(err, ErrMalformed) {
		t.Fatal("unknown outcome accepted")
	}
}

// FuzzDecode: no input panics or allocates beyond its own size; what decodes
// re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(AppendEvent(nil, &Event{ID: "x", Serial: "s", Payload: []byte("{}")}))
	f.Add(AppendEvent(AppendEvent(nil, &Event{ID: "x", Serial: "s"}), &Event{ID: "y", Keyed: true}))
	f.Add(AppendEnvelope(nil, []Mapped{{ID: "a", Outcome: outcome.Stored, Values: []Value{{JSON: []byte("1")}}}}))
	f.Add(AppendReplies(nil, []Reply{{ID: "a", Code: outcome.StorageFailed, Detail: "d"}}))
	f.Add([]byte{wireVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if es, err := DecodeEvents(data); err == nil {
			var again []byte
			for i := range es {
				again = AppendEvent(again, &es[i])
			}
			if data[0] != eventsVersion {
				again = nil
				for i := range es {
					again = appendOldEvent(again, &es[i], data[0])
				}
			}
			if !bytes.Equal(again, data) {
				t.Fatal("events do not re-encode to their bytes")
			}
		}
		if ms, err := DecodeEnvelope(data); err == nil && data[0] == envelopeVersion && !bytes.Equal(AppendEnvelope(nil, ms), data) {
			t.Fatal("envelope does not re-encode to its bytes")
		}
		if rs, err := DecodeReplies(data); err == nil && !bytes.Equal(AppendReplies(nil, rs), data) {
			t.Fatal("replies do not re-encode to their bytes")
		}
	})
}

// An older ingest-api's message (version 3, one event) is still read, so
// that mappers can be upgraded before the front ends.
func TestOneEventMessagesOfTheOlderVersionAreRead(t *testing.T) {
	ev := Event{ID: "id-1", Serial: "s", ReceivedNs: 5, ReadingNs: 5, Rev: 2, Reply: "r", Payload: []byte(`{}`)}
	old := appendOldEvent(nil, &ev, oneEventVersion)
	got, err := DecodeEvents(old)
	if err != nil || !reflect.DeepEqual(got, []Event{ev}) {
		t.Fatalf("version 3 event: %+v %v", got, err)
	}
	if _, err := DecodeEvents(appendOldEvent(old, &ev, oneEventVersion)); !errors.Is(err, ErrMalformed) {
		t.Fatal("a version 3 message with two events accepted")
	}
	// Version 4 (several events, no reading time): read at receive time.
	ev2 := Event{ID: "id-2", Serial: "t", ReceivedNs: 9, ReadingNs: 9, Payload: []byte(`{}`)}
	got, err = DecodeEvents(appendOldEvent(appendOldEvent(nil, &ev, noReadingTime), &ev2, noReadingTime))
	if err != nil || !reflect.DeepEqual(got, []Event{ev, ev2}) {
		t.Fatalf("version 4 events: %+v %v", got, err)
	}
}

// An older mapper's envelope (version 3, no reading time) is read, the
// readings at their receive time, so that writers can be upgraded first.
func TestEnvelopesOfTheOlderVersionAreRead(t *testing.T) {
	m := Mapped{ID: "a", Serial: "s", ReceivedNs: 7, ReadingNs: 7, Outcome: outcome.Stored, Keyed: true, Reply: "r", Payload: []byte(`{}`),
		Values: []Value{{DeviceInput: "t", Entity: "e", Input: "i", JSON: []byte(`1`)}}}
	w := writer{}
	w.byte(wireVersion)
	w.uvarint(1)
	w.str(m.ID)
	w.str(m.Serial)
	w.uvarint(uint64(m.ReceivedNs))
	w.byte(byte(m.Outcome))
	w.byte(2)
	w.str(m.Reply)
	w.bytes(m.Payload)
	w.uvarint(1)
	w.str("t")
	w.str("e")
	w.str("i")
	w.bytes([]byte(`1`))
	got, err := DecodeEnvelope(w.b)
	if err != nil || !reflect.DeepEqual(got, []Mapped{m}) {
		t.Fatalf("version 3 envelope: %+v %v", got, err)
	}
}

// appendOldEvent encodes e as an ingest-api before reading times did
// (version 3: one event; version 4: several).
func appendOldEvent(b []byte, e *Event, version byte) []byte {
	w := writer{b: b}
	if len(w.b) == 0 {
		w.byte(version)
	}
	w.str(e.ID)
	w.str(e.Serial)
	w.uvarint(uint64(e.ReceivedNs))
	w.uvarint(e.Rev)
	w.str(e.Reply)
	w.byte(boolByte(e.Keyed))
	w.bytes(e.Payload)
	return w.b
}
