package backfill

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
)

// Starts racing for one device's slot on a real JetStream KV bucket: one
// wins, the others are told its id; once its job is finished the next
// start wins; a slot naming a job not stored yet stays taken.
func TestOneStartWinsTheSlot(t *testing.T) {
	ctx := context.Background()
	_, js := testenv.Connect(t)
	s, err := Open(ctx, js, "test_backfills", 1, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	const starts = 8
	ids := make([]string, starts)
	busy := make([]string, starts)
	var wg sync.WaitGroup
	for i := range starts {
		ids[i] = nuid.Next()
		wg.Go(func() {
			var err error
			if busy[i], err = s.Claim(ctx, "dev/1", ids[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	winner := ""
	for i := range starts {
		if busy[i] == "" {
			if winner != "" {
				t.Fatalf("two starts won the slot: %s and %s", winner, ids[i])
			}
			winner = ids[i]
		}
	}
	if winner == "" {
		t.Fatal("no start won the slot")
	}
	for i := range starts {
		if busy[i] != "" && busy[i] != winner {
			t.Errorf("a loser was told %s, want the winner %s", busy[i], winner)
		}
	}
	// The winner's job is not stored yet: the slot stays taken.
	if b, err := s.Claim(ctx, "dev/1", nuid.Next()); err != nil || b != winner {
		t.Fatalf("claim before the job is stored: %q %v, want %q", b, err, winner)
	}
	if err := s.Create(ctx, Job{ID: winner, Serial: "dev/1", State: Queued}); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Claim(ctx, "dev/1", nuid.Next()); b != winner {
		t.Fatalf("claim while the job is queued: %q, want %q", b, winner)
	}
	if b, _ := s.Claim(ctx, "dev/2", nuid.Next()); b != "" {
		t.Fatalf("another device's slot: %q, want it free", b)
	}
	if _, err := s.Update(ctx, "dev/1", winner, func(j *Job) error { j.State = Done; return nil }); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Claim(ctx, "dev/1", nuid.Next()); err != nil || b != "" {
		t.Fatalf("claim once the job is done: %q %v, want it taken", b, err)
	}
	// A start that died between taking the slot and storing its job holds
	// it for the grace only; one whose store failed gives it back at once.
	s.grace = 50 * time.Millisecond
	dead := nuid.Next()
	if b, _ := s.Claim(ctx, "dev/3", dead); b != "" {
		t.Fatalf("dev/3's slot taken by %q", b)
	}
	if b, _ := s.Claim(ctx, "dev/3", nuid.Next()); b != dead {
		t.Fatalf("claim within the grace: %q, want %q", b, dead)
	}
	time.Sleep(100 * time.Millisecond)
	next := nuid.Next()
	if b, err := s.Claim(ctx, "dev/3", next); err != nil || b != "" {
		t.Fatalf("claim after the grace: %q %v, want it taken", b, err)
	}
	if err := s.Unclaim(ctx, "dev/3", next); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Claim(ctx, "dev/3", nuid.Next()); err != nil || b != "" {
		t.Fatalf("claim after a start gave the slot back: %q %v", b, err)
	}
	// The slot is no job: listing the device's jobs shows the one job.
	if jobs, err := s.List(ctx, "dev/1"); err != nil || len(jobs) != 1 || jobs[0].ID != winner {
		t.Fatalf("jobs %+v (%v), want only %s", jobs, err, winner)
	}
}
