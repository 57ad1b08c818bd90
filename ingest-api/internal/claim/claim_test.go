package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// take claims one id in an entry of its own.
func (c *Claims) take(ctx context.Context, id string) (Claim, error) {
	cl, held, err := c.TakeAll(ctx, []string{id}, c.Tag())
	if err != nil {
		return Claim{}, err
	}
	if !held[0] {
		return Claim{}, ErrTaken
	}
	return cl, nil
}

// streams makes the streams, the claims stream's window shortened from
// bus.PipelineWindow.
func streams(t testing.TB, window time.Duration) jetstream.JetStream {
	t.Helper()
	_, js := testenv.Connect(t)
	testenv.ClaimsLog(t, js, window, 0)
	return js
}

// copyOn is one ingest-api copy's Claims, following the log until the
// test ends.
func copyOn(t testing.TB, js jetstream.JetStream) *Claims {
	t.Helper()
	c, err := Open(context.Background(), js, bus.DefaultNames, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the claims log was not read")
	}
	return c
}

func open(t testing.TB, window time.Duration) (*Claims, jetstream.JetStream) {
	js := streams(t, window)
	return copyOn(t, js), js
}

// One attempt holds a claim; the others find it taken until it is released
// or the window passes. Other ids are free meanwhile.
func TestOneAttemptHoldsTheClaim(t *testing.T) {
	c, _ := open(t, time.Second)
	ctx := context.Background()
	first, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001")
	if err != nil || first.tag == "" {
		t.Fatalf("first take: %+v %v", first, err)
	}
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001"); !errors.Is(err, ErrTaken) {
		t.Fatalf("second take: %v, want ErrTaken", err)
	}
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000002"); err != nil {
		t.Fatalf("another id: %v", err)
	}
	if err := c.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The second attempt's entry lists the id too, but did not hold it:
	// it does not lengthen the claim, and the release frees the id.
	start := time.Now()
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001"); err != nil {
		t.Fatalf("take after release: %v", err)
	}
	if err := c.Release(ctx, Claim{}); err != nil {
		t.Fatalf("releasing no claim: %v", err)
	}
	// Retries more often than the window (1 s, the stream's MaxAge) find
	// it taken, and do not hold it longer: it is free a window after the
	// claim that holds it.
	for {
		_, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTaken) || time.Since(start) > 5*time.Second {
			t.Fatalf("after %v: %v", time.Since(start), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("free again after %v, within the window", d)
	}
}

// Of many concurrent attempts on one id through three copies, exactly one
// takes the claim; every copy, and one started afterwards, reads the log
// alike.
func TestConcurrentAttemptsOneWins(t *testing.T) {
	c, js := open(t, time.Minute)
	copies := []*Claims{c, copyOn(t, js), copyOn(t, js)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, taken := 0, 0
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := copies[i%3].take(context.Background(), "0b8f6f0e-1111-5aaa-8bbb-0000000000ff")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrTaken):
				taken++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || taken != 29 {
		t.Fatalf("%d took the claim and %d found it taken, want 1 and 29", won, taken)
	}
	late := copyOn(t, js)
	if _, err := late.take(context.Background(), "0b8f6f0e-1111-5aaa-8bbb-0000000000ff"); !errors.Is(err, ErrTaken) {
		t.Fatalf("a copy started later: %v, want ErrTaken", err)
	}
}

// One entry lists a message's requests: each id holds unless an earlier
// entry, or an earlier place in the same entry, lists it; a claim of 1.0.x
// (a message of its own on the id's subject) holds too.
func TestAnEntryHoldsEachOfItsIDsOnce(t *testing.T) {
	c, js := open(t, time.Minute)
	ctx := context.Background()
	old := "0b8f6f0e-1111-5aaa-8bbb-000000000010"
	if _, err := js.Publish(ctx, bus.DefaultNames.ClaimSubject(old), nil, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000011"); err != nil {
		t.Fatal(err)
	}
	ids := []string{"0b8f6f0e-1111-5aaa-8bbb-000000000012", old, "0b8f6f0e-1111-5aaa-8bbb-000000000011",
		"0b8f6f0e-1111-5aaa-8bbb-000000000012", "0b8f6f0e-1111-5aaa-8bbb-000000000013"}
	_, held, err := c.TakeAll(ctx, ids, c.Tag())
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, true}
	for i := range want {
		if held[i] != want[i] {
			t.Fatalf("held %v, want %v", held, want)
		}
	}
	// The release of the ids the entry does not hold leaves out the one
	// it holds at another place.
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000012"); !errors.Is(err, ErrTaken) {
		t.Fatalf("an id the entry holds, listed twice in it: %v, want ErrTaken", err)
	}
}

// An entry written again under its tag (its answer lost) is answered as
// the entry stored first: the same decision, one entry in the stream.
func TestAnEntryWrittenAgainKeepsItsDecision(t *testing.T) {
	c, js := open(t, time.Minute)
	ctx := context.Background()
	ids := []string{"0b8f6f0e-1111-5aaa-8bbb-000000000020", "0b8f6f0e-1111-5aaa-8bbb-000000000021"}
	if _, err := c.take(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	tag := c.Tag()
	for range 3 {
		_, held, err := c.TakeAll(ctx, ids, tag)
		if err != nil {
			t.Fatal(err)
		}
		if !held[0] || held[1] {
			t.Fatalf("held %v, want [true false]", held)
		}
	}
	st, err := js.Stream(ctx, bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first entry, the second (written once), and the release of
	// the id the second does not hold (written once).
	if info.State.Msgs != 3 {
		t.Fatalf("%d messages in the stream, want 3", info.State.Msgs)
	}
	// Another copy's tag is never this copy's to hold.
	other := copyOn(t, js)
	if _, _, err := other.TakeAll(ctx, ids, tag); err == nil {
		t.Fatal("another copy's tag taken as its own")
	}
}

// A copy starting when every entry has expired (the stream's last sequence
// names a message gone) is ready once it has read what is left: nothing.
func TestACopyStartsOnALogWhoseEntriesExpired(t *testing.T) {
	c, js := open(t, time.Second)
	if _, err := c.take(context.Background(), "0b8f6f0e-1111-5aaa-8bbb-000000000030"); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 && info.State.LastSeq > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries not expired: %+v", info.State)
		}
	}
	late := copyOn(t, js) // fails unless ready
	if _, err := late.take(context.Background(), "0b8f6f0e-1111-5aaa-8bbb-000000000030"); err != nil {
		t.Fatalf("after the window, on a copy started late: %v", err)
	}
}

// A claim that cannot be asked for is an error, not "taken".
func TestNoStreamIsAnError(t *testing.T) {
	c, js := open(t, time.Minute)
	if err := js.DeleteStream(context.Background(), bus.DefaultNames.ClaimsStream); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000003"); err == nil || errors.Is(err, ErrTaken) {
		t.Fatalf("take without a stream: %v", err)
	}
}

// BenchmarkTake is one claim in an entry of its own, taken by one of 32
// concurrent callers.
func BenchmarkTake(b *testing.B) {
	c, _ := open(b, time.Minute)
	var n int64
	var mu sync.Mutex
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			id := fmt.Sprintf("0b8f6f0e-1111-5aaa-8bbb-%012d", n)
			mu.Unlock()
			if _, err := c.take(context.Background(), id); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTakeBatch50 is 50 claims in one entry, as a keyed message of 50
// requests takes them.
func BenchmarkTakeBatch50(b *testing.B) {
	c, _ := open(b, time.Minute)
	n := 0
	for b.Loop() {
		ids := make([]string, 50)
		for i := range ids {
			n++
			ids[i] = fmt.Sprintf("0b8f6f0e-1111-5aaa-8bbb-%012d", n)
		}
		if _, _, err := c.TakeAll(context.Background(), ids, c.Tag()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/claim")
}
