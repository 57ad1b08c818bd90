// Package reply routes outcome replies from the workers to the request that
// waits for them, over one subscription per process instead of one per
// request.
package reply

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/event"
)

// Waiter owns the reply subscription of this process.
type Waiter struct {
	prefix string // "devices.reply.<instance>."
	sub    *nats.Subscription
	log    *zap.Logger

	mu      sync.Mutex
	pending map[string]chan event.Reply
}

// NewWaiter subscribes to this instance's reply subjects.
func NewWaiter(nc *nats.Conn, log *zap.Logger) (*Waiter, error) {
	w := &Waiter{
		prefix:  "devices.reply." + nuid.Next() + ".",
		log:     log,
		pending: make(map[string]chan event.Reply),
	}
	sub, err := nc.Subscribe(w.prefix+"*", w.deliver)
	if err != nil {
		return nil, fmt.Errorf("subscribe replies: %w", err)
	}
	// Replies must not be dropped as a slow consumer under a burst: each
	// is small and handled in microseconds.
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("reply limits: %w", err)
	}
	w.sub = sub
	return w, nil
}

// Register announces that the caller awaits the outcome of event id and
// returns the subject the worker replies to, the channel the reply arrives
// on, and a cancel func the caller must call when it stops waiting.
func (w *Waiter) Register(id string) (subject string, ch <-chan event.Reply, cancel func()) {
	c := make(chan event.Reply, 1)
	w.mu.Lock()
	w.pending[id] = c
	w.mu.Unlock()
	return w.prefix + id, c, func() {
		w.mu.Lock()
		delete(w.pending, id)
		w.mu.Unlock()
	}
}

// Pending is the number of requests waiting for a reply.
func (w *Waiter) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

func (w *Waiter) deliver(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, w.prefix)
	var r event.Reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		w.log.Warn("unreadable outcome reply", zap.String("event_id", id), zap.Error(err))
		return
	}
	w.mu.Lock()
	c, ok := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if ok {
		c <- r // buffered, one reply per registration
	}
}

// Close stops receiving replies.
func (w *Waiter) Close() error {
	return w.sub.Unsubscribe()
}
