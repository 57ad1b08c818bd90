package event

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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
	if _, err := DecodeEvents([]byte{eventsFormat}); !errors.Is(err, ErrMalformed) {
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
	f.Add([]byte{repliesFormat, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if es, err := DecodeEvents(data); err == nil {
			var again []byte
			for i := range es {
				again = AppendEvent(again, &es[i])
			}
			if !bytes.Equal(again, data) {
				t.Fatal("events do not re-encode to their bytes")
			}
		}
		if ms, err := DecodeEnvelope(data); err == nil && !bytes.Equal(AppendEnvelope(nil, ms), data) {
			t.Fatal("envelope does not re-encode to its bytes")
		}
		if rs, err := DecodeReplies(data); err == nil && !bytes.Equal(AppendReplies(nil, rs), data) {
			t.Fatal("replies do not re-encode to their bytes")
		}
	})
}

// release1 is what release 1.0.0 wrote in each format (testdata/1.0.0/):
// the events of one message, one envelope, one batch of outcomes.
var release1 = struct {
	events   []Event
	envelope []Mapped
	replies  []Reply
}{
	events: []Event{
		{ID: "6f0c1c1e-0000-5000-8000-000000000001", Serial: "SN-1", ReceivedNs: 1795322239123456789, ReadingNs: 1795322230000000000,
			Group: "g-1", Token: "primary", Rev: 42, Reply: "devices.reply.abc", Keyed: true, Payload: []byte(`{"serial":"SN-1","data":{"t":21.5}}`)},
		{ID: "6f0c1c1e-0000-5000-8000-000000000002", Serial: "SN-1", ReceivedNs: 1795322239123456790, ReadingNs: 1795322239123456790,
			TimeNote: "ts is not a time: stored at receive time", Rev: 42, Reply: "devices.reply.abc", Payload: []byte(`{}`)},
	},
	envelope: []Mapped{
		{ID: "a", Serial: "SN-1", ReceivedNs: 7, ReadingNs: -3, TimeNote: "n", Group: "g", Token: "secondary", Outcome: outcome.Stored,
			MaybeStored: true, Keyed: true, Reply: "r", Payload: []byte(`{"t":1}`), Values: []Value{{DeviceInput: "t", Entity: "e", Input: "i", JSON: []byte(`1`)}}},
		{ID: "b", Serial: "SN-2", ReceivedNs: 8, ReadingNs: 8, Outcome: outcome.NoConnections, Replay: true, Payload: []byte(`{"x":null}`)},
	},
	replies: []Reply{{ID: "a", Code: outcome.Stored}, {ID: "b", Code: outcome.StorageFailed, Detail: "storage error: x"}},
}

// Every release's messages (testdata/<release>/) are read as that release
// meant them, so that a rolling upgrade, old and new copies side by side,
// loses nothing; and this release writes exactly its own fixtures, so that
// a change of format cannot go unnoticed (give the format a new version,
// keep reading the old one, add the release's fixtures:
// UPDATE_WIRE_FIXTURES=<release> go test ./pkg/event writes them).
func TestReadsEveryReleasesFormats(t *testing.T) {
	var events []byte
	for i := range release1.events {
		events = AppendEvent(events, &release1.events[i])
	}
	current := map[string][]byte{"events.bin": events, "envelope.bin": AppendEnvelope(nil, release1.envelope), "replies.bin": AppendReplies(nil, release1.replies)}
	if rel := os.Getenv("UPDATE_WIRE_FIXTURES"); rel != "" {
		for name, b := range current {
			if err := os.MkdirAll(filepath.Join("testdata", rel), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("testdata", rel, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", "1.0.0", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, b := range current {
		if !bytes.Equal(read(name), b) {
			t.Errorf("this release writes %s differently from release 1.0.0: a new format version is due", name)
		}
	}
	if got, err := DecodeEvents(read("events.bin")); err != nil || !reflect.DeepEqual(got, release1.events) {
		t.Errorf("1.0.0 events: %+v %v", got, err)
	}
	if got, err := DecodeEnvelope(read("envelope.bin")); err != nil || !reflect.DeepEqual(got, release1.envelope) {
		t.Errorf("1.0.0 envelope: %+v %v", got, err)
	}
	if got, err := DecodeReplies(read("replies.bin")); err != nil || !reflect.DeepEqual(got, release1.replies) {
		t.Errorf("1.0.0 replies: %+v %v", got, err)
	}
}
