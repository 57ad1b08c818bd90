package claim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// take claims one id.
func (c *Claims) take(ctx context.Context, id string) (Claim, error) {
	cls, errs := c.TakeAll(ctx, []string{id}, nil)
	return cls[0], errs[0]
}

func open(t testing.TB, window time.Duration) (*Claims, jetstream.JetStream) {
	t.Helper()
	_, js := testenv.Connect(t)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, bus.Config{Replicas: 1, StreamMaxAge: time.Hour, StreamMaxBytes: 1 << 26,
		Prefix: bus.DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	// The window, shortened from bus.PipelineWindow.
	st, err := js.Stream(ctx, bus.DefaultNames.ClaimsStream)
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxAge, sc.Duplicates = window, window
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	c, err := Open(ctx, js, bus.DefaultNames)
	if err != nil {
		t.Fatal(err)
	}
	return c, js
}

// One attempt holds a claim; the others find it taken until it is released
// or the window passes. Other ids are free meanwhile.
func TestOneAttemptHoldsTheClaim(t *testing.T) {
	c, _ := open(t, time.Second)
	ctx := context.Background()
	first, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001")
	if err != nil || first.seq == 0 {
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
	again, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001")
	if err != nil {
		t.Fatalf("take after release: %v", err)
	}
	if err := c.Release(ctx, Claim{}); err != nil {
		t.Fatalf("releasing no claim: %v", err)
	}
	// The window is the stream's MaxAge: then the id is free again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl, err := c.take(ctx, "0b8f6f0e-1111-5aaa-8bbb-000000000001")
		if err == nil {
			if cl.seq <= again.seq {
				t.Fatalf("sequence %d after %d", cl.seq, again.seq)
			}
			break
		}
		if !errors.Is(err, ErrTaken) || time.Now().After(deadline) {
			t.Fatalf("after the window: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Of many concurrent attempts on one id, exactly one takes the claim.
func TestConcurrentAttemptsOneWins(t *testing.T) {
	c, _ := open(t, time.Minute)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, taken := 0, 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.take(context.Background(), "0b8f6f0e-1111-5aaa-8bbb-0000000000ff")
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
	if won != 1 || taken != 19 {
		t.Fatalf("%d took the claim and %d found it taken, want 1 and 19", won, taken)
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

// BenchmarkTake is one claim, taken by one of 64 concurrent callers.
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

func BenchmarkTakeBatch50(b *testing.B) {
	c, _ := open(b, time.Minute)
	n := 0
	for b.Loop() {
		var futs []jetstream.PubAckFuture
		for range 50 {
			n++
			fut, err := c.js.PublishMsgAsync(&nats.Msg{Subject: c.names.ClaimSubject(fmt.Sprintf("0b8f6f0e-1111-5aaa-8bbb-%012d", n))}, jetstream.WithExpectLastSequencePerSubject(0))
			if err != nil {
				b.Fatal(err)
			}
			futs = append(futs, fut)
		}
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/claim")
}

// A claim whose answer was lost is resolved by its tag: the claim standing
// is returned when it is this attempt's, another attempt's is ErrTaken, and
// a claim nobody holds is taken.
func TestResolveTellsTheLostAttemptsClaim(t *testing.T) {
	c, _ := open(t, time.Minute)
	ctx := context.Background()
	cls, errs := c.TakeAll(ctx, []string{"lost"}, []string{"tag-a"})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	got, err := c.Resolve(ctx, "lost", "tag-a")
	if err != nil || got != cls[0] {
		t.Fatalf("this attempt's standing claim resolved as %+v, %v; want %+v", got, err, cls[0])
	}
	if _, err := c.Resolve(ctx, "lost", "tag-b"); !errors.Is(err, ErrTaken) {
		t.Fatalf("another attempt's claim resolved as %v, want ErrTaken", err)
	}
	if _, err := c.Resolve(ctx, "lost", ""); !errors.Is(err, ErrTaken) {
		t.Fatalf("an untagged resolve of a tagged claim: %v, want ErrTaken", err)
	}
	free, err := c.Resolve(ctx, "free", "tag-c")
	if err != nil || free.seq == 0 {
		t.Fatalf("a free claim resolved as %+v, %v; want it taken", free, err)
	}
	if _, err := c.take(ctx, "free"); !errors.Is(err, ErrTaken) {
		t.Fatalf("the claim Resolve took is not held: %v", err)
	}
}
