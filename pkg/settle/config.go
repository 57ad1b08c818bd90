package settle

import (
	"errors"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// Register adds the redelivery bounds as settings, with a worker's
// defaults; def.RetryDelay (the first wait) is the worker's own, capped by
// RETRY_MAX_DELAY.
func (l *Limits) Register(s *envflag.Set, def Limits) {
	*l = def
	s.Int(&l.MaxDeliver, "max-deliver", def.MaxDeliver, "most deliveries of one message; a message that would be retried again goes to the dead letters")
	s.Duration(&l.RetryMaxDelay, "retry-max-delay", def.RetryMaxDelay, "longest wait between two tries of a failed message (the wait starts shorter and doubles with each try)")
}

// Validate reports the first thing wrong with l.
func (l Limits) Validate() error {
	switch {
	case l.MaxDeliver < 2:
		return errors.New("MAX_DELIVER must be at least 2")
	case l.RetryMaxDelay <= 0 || l.RetryMaxDelay > time.Hour:
		return errors.New("RETRY_MAX_DELAY must be positive and at most 1h")
	}
	return nil
}
