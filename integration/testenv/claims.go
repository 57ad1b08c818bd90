package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
)

// ClaimsLog makes the pipeline's streams on js (bus.EnsureStreams) with the
// claims stream's window (its duplicate window) shortened to window and
// its entries kept lookback past it, as a test of the claims log needs, and
// returns the claims stream.
func ClaimsLog(t testing.TB, js jetstream.JetStream, window, lookback time.Duration) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26,
		Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxAge, sc.Duplicates = window+lookback, window
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	return st
}
