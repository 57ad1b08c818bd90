package claimlog

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// reading is a Log, not yet read, of a claims stream of the window, kept
// that long and lookback more, on a real JetStream server, and the stream.
func reading(t *testing.T, window, lookback time.Duration) (*Log, jetstream.Stream) {
	t.Helper()
	_, js := testenv.Connect(t)
	st := testenv.ClaimsLog(t, js, window, lookback)
	l, err := Open(context.Background(), js, bus.DefaultNames, "", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return l, st
}

// A gap after a message younger than the window by more than twice the
// servers' clocks may differ was deleted: no claim is unknown for it.
// After an older one, or before anything was read, the missing messages
// may have expired unread: claims are unknown until skewMargin after the
// server's time.
func TestAGapIsTakenForExpiryWhenItMayBe(t *testing.T) {
	l, st := reading(t, time.Minute, 0)
	ctx := context.Background()
	now := time.Now()
	if until, err := l.unknownAfterGap(ctx, st, now.Add(-time.Second)); err != nil || !until.IsZero() {
		t.Fatalf("after a young message: %v %v, want nothing unknown", until, err)
	}
	for _, lastAt := range []time.Time{now.Add(-45 * time.Second), {}} {
		until, err := l.unknownAfterGap(ctx, st, lastAt)
		if err != nil {
			t.Fatal(err)
		}
		if until.Before(now.Add(skewMargin)) || until.After(time.Now().Add(skewMargin+time.Second)) {
			t.Fatalf("after %v: unknown until %v, want about %v", lastAt, until, now.Add(skewMargin))
		}
	}
}

// With a lookback, a gap may hide only messages older than the stream's
// MaxAge: after a message younger than that by more than the clocks may
// differ nothing is unknown; otherwise claims are unknown until skewMargin
// after the server's time less the lookback.
func TestAGapWithALookback(t *testing.T) {
	l, st := reading(t, time.Minute, time.Minute)
	ctx := context.Background()
	now := time.Now()
	if until, err := l.unknownAfterGap(ctx, st, now.Add(-90*time.Second)); err != nil || !until.IsZero() {
		t.Fatalf("after a message 90 s old, kept 2 min: %v %v, want nothing unknown", until, err)
	}
	until, err := l.unknownAfterGap(ctx, st, now.Add(-115*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := now.Add(skewMargin - time.Minute)
	if until.Before(want) || until.After(time.Now().Add(skewMargin-time.Minute+time.Second)) {
		t.Fatalf("after a message 115 s old: unknown until %v, want about %v", until, want)
	}
}
