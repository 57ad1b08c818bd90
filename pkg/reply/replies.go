package reply

import (
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/event"
)

// Replies gathers outcomes by the subject they go to, so that a batch's
// answers cost one message per waiting instance rather than one per event.
type Replies struct {
	by map[string][]event.Reply
}

// Add queues r for subject; an empty subject means nobody waits.
func (rs *Replies) Add(subject string, r event.Reply) {
	if subject == "" {
		return
	}
	if rs.by == nil {
		rs.by = make(map[string][]event.Reply)
	}
	rs.by[subject] = append(rs.by[subject], r)
}

// Send publishes every queued group (core NATS: an instance that is gone
// simply misses its answers), logs the first failure on log, and empties
// rs.
func (rs *Replies) Send(nc *nats.Conn, log *zap.Logger) {
	var first error
	for subject, group := range rs.by {
		if err := nc.Publish(subject, event.AppendReplies(nil, group)); err != nil && first == nil {
			first = err
		}
	}
	clear(rs.by)
	if first != nil {
		log.Warn("send outcomes", zap.Error(first))
	}
}
