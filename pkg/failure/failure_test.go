package failure

import (
	"errors"
	"fmt"
	"testing"
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
