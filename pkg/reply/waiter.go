// Package reply carries the storage outcomes from the workers to the
// requests waiting in ingest-api: the workers gather a batch's outcomes by
// the ingest-api copy that waits (Replies, one message per copy), and each
// copy routes them to its requests over one subscription (Waiter).
package reply

import (
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/event"
)

// Waiter owns the reply subscription of this process.
type Waiter struct {
	subject string // "<prefix>.reply.<instance>"
	sub     *nats.Subscription
	log     *zap.Logger

	mu sync.Mutex
	// pending holds the channels of the requests waiting for each event:
	// usually one, more when a device retries a keyed event while the
	// first attempt still waits on this instance.
	pending map[string][]chan event.Reply
}

// NewWaiter subscribes to this instance's reply subject, under prefix
// (bus.Names.ReplyPrefix).
func NewWaiter(nc *nats.Conn, prefix string, log *zap.Logger) (*Waiter, error) {
	w := &Waiter{
		subject: prefix + nuid.Next(),
		log:     log,
		pending: make(map[string][]chan event.Reply),
	}
	sub, err := nc.Subscribe(w.subject, w.deliver)
	if err != nil {
		return nil, fmt.Errorf("subscribe replies: %w", err)
	}
	// Replies must not be dropped as a slow consumer under a burst.
	if err := sub.SetPendingLimits(1<<16, 256<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("reply limits: %w", err)
	}
	w.sub = sub
	return w, nil
}

// Subject is where workers send this instance's outcomes.
func (w *Waiter) Subject() string { return w.subject }

// RegisterAll announces that the caller awaits the outcomes of events ids
// (one reading, or the events of one backlog request) and returns the
// channel they arrive on, one each, and a cancel func the caller must call
// when it stops waiting.
func (w *Waiter) RegisterAll(ids []string) (ch <-chan event.Reply, cancel func()) {
	c := make(chan event.Reply, len(ids))
	w.mu.Lock()
	for _, id := range ids {
		w.pending[id] = append(w.pending[id], c)
	}
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, id := range ids {
			cs := slices.DeleteFunc(w.pending[id], func(x chan event.Reply) bool { return x == c })
			if len(cs) == 0 {
				delete(w.pending, id)
			} else {
				w.pending[id] = cs
			}
		}
	}
}

func (w *Waiter) deliver(m *nats.Msg) {
	rs, err := event.DecodeReplies(m.Data)
	if err != nil {
		w.log.Warn("unreadable outcome replies", zap.Error(err))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range rs {
		for _, c := range w.pending[r.ID] {
			c <- r // buffered, one reply per registration
		}
		delete(w.pending, r.ID)
	}
}

// Close stops receiving replies.
func (w *Waiter) Close() error {
	return w.sub.Unsubscribe()
}
