package reply

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// Two requests waiting for one event (a device retried a keyed reading
// while the first attempt waits) both get its outcome; a cancelled one
// does not hold the others back.
func TestEveryWaiterOfAnEventIsAnswered(t *testing.T) {
	nc, _ := testenv.Connect(t)
	w, err := NewWaiter(nc, "test.reply.", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, cancelA := w.RegisterAll([]string{"ev"})
	defer cancelA()
	gone, cancelGone := w.RegisterAll([]string{"ev"})
	b, cancelB := w.RegisterAll([]string{"ev"})
	defer cancelB()
	other, cancelOther := w.RegisterAll([]string{"other"})
	defer cancelOther()
	cancelGone()

	if err := nc.Publish(w.Subject(), event.AppendReplies(nil, []event.Reply{{ID: "ev", Code: outcome.NoConnections}})); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan event.Reply{"first": a, "second": b} {
		select {
		case r := <-ch:
			if r.ID != "ev" || r.Code != outcome.NoConnections {
				t.Fatalf("%s waiter got %+v", name, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s waiter not answered", name)
		}
	}
	select {
	case r := <-gone:
		t.Fatalf("a cancelled waiter got %+v", r)
	case r := <-other:
		t.Fatalf("another event's waiter got %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	w.mu.Lock()
	left := len(w.pending)
	w.mu.Unlock()
	if left != 1 {
		t.Fatalf("%d events still pending, want 1 (other)", left)
	}
}
