package diag

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// BenchmarkTallyAnswer counts stored answers of a fleet of 1,000 devices
// from all cores at once: the count every device request pays.
func BenchmarkTallyAnswer(b *testing.B) {
	tl := NewTally(DefaultLimits, func(context.Context, Report) error { return nil }, zap.NewNop())
	serials := make([]string, 1000)
	for i := range serials {
		serials[i] = "dev-" + strconv.Itoa(i)
	}
	kind := KindOf(outcome.Stored)
	now := time.Now()
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			i = (i + 7919) % len(serials)
			tl.Answer(Answer{Serial: serials[i], Known: true, Authenticated: true, Kind: kind, Requests: 1, Readings: 1, At: now})
		}
	})
}
