package claim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
)

// claimsStream is the claims stream of js.
func claimsStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// noRereads fails the test if a copy read the log again.
func noRereads(t *testing.T, copies ...*Claims) {
	t.Helper()
	for i, c := range copies {
		if n := c.Rereads(); n != 0 {
			t.Fatalf("copy %d read the log again %d times", i, n)
		}
	}
}

// A message deleted inside the log (a copy of 1.0.x releasing its claim,
// an operator) is read past: a copy starting after it is ready and
// decides, the copies reading read on, none reads the log again; the
// deleted entry holds nothing for the copy that never read it.
func TestAMessageDeletedInsideTheLogIsReadPast(t *testing.T) {
	c, js := open(t, time.Minute)
	ctx := context.Background()
	ids := []string{"0b8f6f0e-1111-5aaa-8bbb-000000000040", "0b8f6f0e-1111-5aaa-8bbb-000000000041", "0b8f6f0e-1111-5aaa-8bbb-000000000042"}
	for _, id := range ids {
		if _, err := c.take(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := claimsStream(t, js).DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	late := copyOn(t, js) // fails unless ready
	if _, err := late.take(ctx, ids[1]); err != nil {
		t.Fatalf("the id of the deleted entry, on a copy that never read it: %v", err)
	}
	if _, err := late.take(ctx, ids[2]); !errors.Is(err, ErrTaken) {
		t.Fatalf("an id held from before the late copy's start: %v, want ErrTaken", err)
	}
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000043"); err != nil {
		t.Fatalf("a new id on the first copy: %v", err)
	}
	time.Sleep(2 * time.Second) // the readings verify themselves meanwhile
	noRereads(t, c, late)
}

// A stream made anew (and so one numbered again after losing its last
// messages) is read again: a copy does not resume past entries it never
// read and hold what they hold.
func TestALogNumberedAgainIsReadAgain(t *testing.T) {
	c, js := open(t, time.Minute)
	ctx := context.Background()
	for _, id := range []string{"0b8f6f0e-1111-5aaa-8bbb-000000000050", "0b8f6f0e-1111-5aaa-8bbb-000000000051", "0b8f6f0e-1111-5aaa-8bbb-000000000052"} {
		if _, err := c.take(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	cfg := claimsStream(t, js).CachedInfo().Config
	if err := js.DeleteStream(ctx, cfg.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Another copy holds x at sequence 1 of the new stream.
	x := "0b8f6f0e-1111-5aaa-8bbb-000000000053"
	if _, err := copyOn(t, js).take(ctx, x); err != nil {
		t.Fatal(err)
	}
	// The first copy's attempts on x never hold it, whatever sequence
	// their entries get; the first may fail (the reading found behind).
	taken := 0
	for i := range 8 {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.take(tctx, x)
		cancel()
		switch {
		case err == nil:
			t.Fatalf("attempt %d on the first copy held an id another copy holds", i)
		case errors.Is(err, ErrTaken):
			taken++
		case i > 0:
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if taken < 7 {
		t.Fatalf("%d of 8 attempts found the claim taken", taken)
	}
	if c.Rereads() == 0 {
		t.Fatal("the log was not read again")
	}
}

// Retries on a copy that started while the first attempt's entry stood
// (its hold unknown to that copy) are answered unknown, not held, while
// that entry is in its window, and are free a window after it however
// often they come: each one's unknown entry is released by its copy.
func TestRetriesOfAnUnknownClaimAreFreeAWindowAfterIt(t *testing.T) {
	window := 2 * time.Second
	first, js := open(t, window)
	ctx := context.Background()
	x := "0b8f6f0e-1111-5aaa-8bbb-000000000060"
	if _, err := first.take(ctx, x); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	late := copyOn(t, js)
	for {
		_, err := late.take(ctx, x)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTaken) {
			t.Fatal(err)
		}
		if time.Since(start) > 3*window {
			t.Fatalf("still taken %v after the first attempt (window %v)", time.Since(start), window)
		}
		// The first copy reads the late copy's entries, released, alike.
		if _, err := first.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000061"); err != nil && !errors.Is(err, ErrTaken) {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if d := time.Since(start); d < window*9/10 {
		t.Fatalf("held by the late copy %v after the first attempt, within the window %v", d, window)
	}
	noRereads(t, first, late)
}

// The release of the ids an entry holds unknown and the release of the
// whole entry are two messages that both stay in the stream (it keeps one
// per subject): the second does not take the first away from the copies
// that read the log after both.
func TestBothReleasesOfAnEntryStay(t *testing.T) {
	c, js := open(t, time.Minute)
	ctx := context.Background()
	tag := c.Tag()
	c.free(ctx, tag, []string{"0b8f6f0e-1111-5aaa-8bbb-000000000070"})
	if err := c.Release(ctx, Claim{tag: tag}); err != nil {
		t.Fatal(err)
	}
	st := claimsStream(t, js)
	for _, subject := range []string{bus.DefaultNames.ClaimFreeSubject(tag), bus.DefaultNames.ClaimReleaseSubject(tag)} {
		if _, err := st.GetLastMsgForSubject(ctx, subject); err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 || info.State.NumDeleted != 0 {
		t.Fatalf("stream state %+v, want 2 messages, none deleted", info.State)
	}
}
