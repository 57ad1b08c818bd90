package claimlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	l, err := Open(context.Background(), js, bus.DefaultNames, "", nil, zap.NewNop())
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

// tapped records what a Tap is told, in order.
type tapped struct {
	mu   sync.Mutex
	told []string
}

func (r *tapped) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told = append(r.told, s)
}

func (r *tapped) Restarted() { r.add("restarted") }

func (r *tapped) Read(at, recv time.Time, ids []string, release, lost bool) {
	if at.IsZero() || recv.Before(at.Add(-time.Minute)) {
		r.add("read without its times")
	}
	r.add(fmt.Sprintf("read %s release=%v lost=%v", strings.Join(ids, ","), release, lost))
}

func (r *tapped) Checked(asked, answered, server time.Time, caught bool) {
	if caught && !server.IsZero() && !answered.Before(asked) {
		r.add("caught")
	}
}

// what returns what the tap was told, the checks after the first of a run
// of them left out.
func (r *tapped) what() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.told {
		if s == "caught" && len(out) > 0 && out[len(out)-1] == "caught" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// A Tap is told, in the log's order, each start of a reading, each entry's
// ids and each release's, and that the reading caught up; a reading again
// tells it everything the stream holds again (writer-worker's filter of
// keys seen is fed so).
func TestTheTapIsToldWhatTheReadingReads(t *testing.T) {
	_, js := testenv.Connect(t)
	testenv.ClaimsLog(t, js, time.Minute, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range []struct{ subject, data string }{
		{bus.DefaultNames.ClaimLogSubject("tag-a"), "x\ny"},
		{bus.DefaultNames.ClaimFreeSubject("tag-a"), "y"},
	} {
		if _, err := js.Publish(ctx, m.subject, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
	}
	tap := &tapped{}
	l, err := Open(ctx, js, bus.DefaultNames, "", tap, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	once := []string{"restarted", "read x,y release=false lost=false", "read y release=true lost=false", "caught"}
	waitTold(t, tap, once)
	l.f.mu.Lock()
	gen := l.f.gen
	l.f.mu.Unlock()
	l.Reread(gen)
	waitTold(t, tap, append(once, once...))
}

// waitTold waits up to 5 s for the tap to have been told want.
func waitTold(t *testing.T, tap *tapped, want []string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(tap.what(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("told %q, want %q", tap.what(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
