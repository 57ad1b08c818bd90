package devicesdk

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkDrain: what the SDK costs to drain a backlog of readings of two
// inputs (read from the queue, sent in batches of 1,000, settled), against a
// server that answers every batch stored at once, as the service does (with
// a result per message): the SDK's own part of a drain, apart from the
// service's.
func BenchmarkDrain(b *testing.B) {
	const n = 20_000
	result := `{"success":true,"message":"Message processed and data stored successfully"}`
	answer := `{"success":true,"message":"Message processed and data stored successfully","results":[` +
		strings.Repeat(result+",", 999) + result + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	rs := make([]Reading, n)
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for i := range rs {
		rs[i] = Reading{Data: map[string]any{"v": i, "w": float64(i) / 8}, Time: t0.Add(time.Duration(i) * time.Second)}
	}
	b.ReportAllocs()
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		c, err := Open(Config{URL: srv.URL, Serial: "dev-1", Token: "tok", Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.RecordAll(rs); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		b.StartTimer()
		go func() { done <- c.Run(ctx) }()
		for c.Status().Queued > 0 {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		elapsed += time.Since(start)
		cancel()
		<-done
		if s := c.Status(); s.Stored != n {
			b.Fatalf("stored %d of %d", s.Stored, n)
		}
		c.Close()
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "readings/s")
}
