package failure

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestKinds(t *testing.T) {
	if AsPermanent(nil) != nil {
		t.Fatal("AsPermanent(nil) is not nil")
	}
	base := errors.New("rejected")
	p := AsPermanent(base)
	if KindOf(p) != Permanent || KindOf(fmt.Errorf("batch: %w", p)) != Permanent || !errors.Is(p, base) {
		t.Fatal("a permanent error lost its kind or its cause when wrapped")
	}
	if KindOf(base) != Transient || KindOf(fmt.Errorf("x: %w", base)) != Transient {
		t.Fatal("an unmarked error must be transient")
	}
	if p.Error() != "rejected" || AsPermanent(p) != p {
		t.Fatal("marking twice changed the error")
	}
}

func TestThrottled(t *testing.T) {
	err := fmt.Errorf("insert: %w", AsThrottled(errors.New("too many parts"), 3*time.Second))
	if KindOf(err) != Throttled || WaitOf(err) != 3*time.Second || err.Error() != "insert: too many parts" {
		t.Fatalf("throttled: kind %v wait %v text %q", KindOf(err), WaitOf(err), err)
	}
	if KindOf(AsPermanent(err)) != Permanent || WaitOf(errors.New("x")) != 0 || AsThrottled(nil, time.Second) != nil {
		t.Fatal("permanent must win over throttled; an unmarked error waits 0; nil stays nil")
	}
}
