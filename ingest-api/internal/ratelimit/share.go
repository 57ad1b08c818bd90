package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// ShareEvery is how often a copy tells the others what it granted: a
// device is held to its rate across copies within this lag (it may exceed
// its burst once by what the other copies grant in it).
const ShareEvery = 250 * time.Millisecond

// maxShare bounds one message: beyond, the rest of what was granted goes
// in further messages.
const maxShare = 256 << 10

// share is one copy's message: readings granted per serial since its last.
type share struct {
	From    string         `json:"from"`
	Granted map[string]int `json:"granted"`
}

// Sharing makes l share what it grants with the other copies of ingest-api
// on subject, and debit what they grant; run does it until ctx ends. A
// limiter that limits nothing shares nothing.
func (l *Limiter) Sharing(nc *nats.Conn, subject, instance string, log *zap.Logger) (run func(ctx context.Context) error) {
	if l == nil || l.perSecond <= 0 {
		return func(ctx context.Context) error { <-ctx.Done(); return nil }
	}
	l.mu.Lock()
	l.granted = map[string]int{}
	l.mu.Unlock()
	return func(ctx context.Context) error {
		sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
			var sh share
			if json.Unmarshal(m.Data, &sh) != nil || sh.From == instance {
				return
			}
			for serial, n := range sh.Granted {
				l.debit(serial, n)
			}
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		t := time.NewTicker(ShareEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			l.mu.Lock()
			granted := l.granted
			if len(granted) > 0 {
				l.granted = map[string]int{}
			}
			l.mu.Unlock()
			for _, b := range encodeShares(instance, granted) {
				if err := nc.Publish(subject, b); err != nil {
					log.Debug("share rate", zap.Error(err))
				}
			}
		}
	}
}

// encodeShares splits granted into messages of at most about maxShare.
func encodeShares(from string, granted map[string]int) [][]byte {
	var out [][]byte
	part, size := map[string]int{}, 0
	flush := func() {
		if len(part) == 0 {
			return
		}
		b, _ := json.Marshal(share{From: from, Granted: part})
		out = append(out, b)
		part, size = map[string]int{}, 0
	}
	for serial, n := range granted {
		part[serial] = n
		if size += len(serial) + 16; size >= maxShare {
			flush()
		}
	}
	flush()
	return out
}
