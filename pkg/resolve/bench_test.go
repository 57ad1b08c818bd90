package resolve

import (
	"testing"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// BenchmarkResolve: the mapper's per-event work: decode the event, resolve
// its data against the device's inputs, encode it into an envelope.
func BenchmarkResolve(b *testing.B) {
	c := registry.NewCache()
	c.Put(registry.Device{Serial: "bench-00001", ConnectionType: registry.ConnectionAPI, AccessToken: "x", Inputs: []registry.Input{
		{Name: "v", Entity: "bench-entity", EntityInput: "v"}, {Name: "t", Entity: "bench-entity", EntityInput: "t"}, {Name: "volt"},
	}}, 1)
	dev, _ := c.Lookup("bench-00001")
	data := event.AppendEvent(nil, &event.Event{ID: "0b6f5c2e-7a0e-4d6b-9c1f-000000000001", Serial: "bench-00001", ReceivedNs: 1,
		Reply: "devices.reply.abcdefghijklmnopqrstuv", Payload: []byte(`{"serial":"bench-00001","data":{"v":21.5,"t":true,"volt":3.3}}`)})
	out := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		evs, err := event.DecodeEvents(data)
		if err != nil {
			b.Fatal(err)
		}
		m, err := Event(evs[0], dev, nil)
		if err != nil || m.Outcome != outcome.Stored || len(m.Values) != 2 {
			b.Fatalf("%+v %v", m, err)
		}
		out = event.AppendEnvelope(out[:0], []event.Mapped{m})
	}
}
