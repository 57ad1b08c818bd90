package batch

import (
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/dedupe"
)

// BenchmarkBuildBatch: decoding one envelope of 500 events and building its
// insert rows, the writer's per-batch work besides the insert itself.
func BenchmarkBuildBatch(b *testing.B) {
	const n = 500
	ms := make([]event.Mapped, n)
	for i := range ms {
		ms[i] = event.Mapped{
			ID: fmt.Sprintf("0b6f5c2e-7a0e-4d6b-9c1f-%012d", i), Serial: fmt.Sprintf("bench-%05d", i), ReceivedNs: time.Now().UnixNano(), ReadingNs: time.Now().UnixNano(),
			Outcome: outcome.Stored, Reply: "devices.reply.abcdefghijklmnopqrstuv",
			Payload: []byte(fmt.Sprintf(`{"serial":"bench-%05d","data":{"v":%d.5}}`, i, i)),
			Values:  []event.Value{{DeviceInput: "v", Entity: "bench-entity", Input: "v", JSON: []byte(fmt.Sprintf("%d.5", i))}},
		}
	}
	data := event.AppendEnvelope(nil, ms)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		evs, err := event.DecodeEnvelope(data)
		if err != nil {
			b.Fatal(err)
		}
		items := make([]dedupe.Item, len(evs))
		idx := make([]int, len(evs))
		for i := range evs {
			items[i], idx[i] = dedupe.Item{Event: evs[i]}, i
		}
		if rows := valueRows(items, idx); len(rows) != n {
			b.Fatalf("%d rows", len(rows))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}
