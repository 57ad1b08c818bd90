package program

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// journal records what parts did, in order.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.events = append(j.events, s)
	j.mu.Unlock()
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.events...)
}

// part runs until told to stop, records its start and stop, and reports
// ready after delay (nil Ready when delay is negative).
func (j *journal) part(name string, delay time.Duration) Part {
	p := Part{Name: name}
	var ready chan struct{}
	if delay >= 0 {
		ready = make(chan struct{})
		p.Ready = ready
	}
	p.Run = func(ctx context.Context) error {
		j.add("start " + name)
		if ready != nil {
			time.AfterFunc(delay, func() { j.add("ready " + name); close(ready) })
		}
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // draining takes a while
		j.add("stop " + name)
		return nil
	}
	return p
}

func TestStagesStartInOrderAndStopInReverse(t *testing.T) {
	var j journal
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, zap.NewNop(), Stage{j.part("registry", 50*time.Millisecond)}, Stage{j.part("consumer", -1)})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(j.list()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"start registry", "ready registry", "start consumer", "stop consumer", "stop registry"}
	if got := j.list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("lifecycle %v, want %v", got, want)
	}
}

func TestAFailingPartStopsTheProgram(t *testing.T) {
	var j journal
	boom := errors.New("watch lost")
	failing := Part{Name: "watch", Run: func(ctx context.Context) error {
		time.Sleep(20 * time.Millisecond)
		return boom
	}}
	err := Run(context.Background(), zap.NewNop(), Stage{failing, j.part("health", -1)}, Stage{j.part("http", -1)})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "watch: ") {
		t.Fatalf("Run = %v, want the watch's failure", err)
	}
	got := j.list()
	if len(got) != 4 || got[2] != "stop http" || got[3] != "stop health" {
		t.Fatalf("lifecycle %v: want both started, http stopped before health", got)
	}

	// A part that returns without an error before being told to is a
	// failure too.
	ended := Part{Name: "server", Run: func(context.Context) error { return nil }}
	if err := Run(context.Background(), zap.NewNop(), Stage{ended}); err == nil || err.Error() != "server: ended" {
		t.Fatalf("Run = %v, want %q", err, "server: ended")
	}
}

// Stopping while a stage is not ready yet: later stages never start.
func TestStopBeforeReady(t *testing.T) {
	var j journal
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if err := Run(ctx, zap.NewNop(), Stage{j.part("registry", time.Hour)}, Stage{j.part("consumer", -1)}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got, want := j.list(), []string{"start registry", "stop registry"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lifecycle %v, want %v", got, want)
	}
}

// An error returned while draining is reported.
func TestDrainErrorsAreReturned(t *testing.T) {
	p := Part{Name: "http", Run: func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("shutdown: deadline exceeded")
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, zap.NewNop(), Stage{p}); err == nil || err.Error() != "http: shutdown: deadline exceeded" {
		t.Fatalf("Run = %v", err)
	}
}
