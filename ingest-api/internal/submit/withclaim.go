package submit

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
)

// sendWithClaims writes the claims of subs in one entry of the claims log
// and publishes all their events right after it, in one message tagged
// with the entry (bus.ClaimTagHeader): a first attempt's events go out
// without waiting for a round trip. The writers read the log too
// (pkg/claimlog) and store only the events of the requests the entry
// holds; they release the claims it does not hold. This copy reads the
// entry as well, to send each request whose claim an earlier attempt holds
// (a retry) to wait for that attempt's outcomes, as the writers drop its
// events; the others wait for their own. The rule is the same for every
// reader, so they agree, save where one cannot tell (claimlog.Unknown):
// then a request this copy judged held may hear no outcome and is answered
// 503 at its deadline, and one it judged unknown hears its own.
func (p *publisher) sendWithClaims(subs []*submission, release func(time.Duration)) {
	ids := make([]string, len(subs))
	sent := make([]part, len(subs))
	for i, s := range subs {
		ids[i], sent[i] = s.claim, part{s: s, evs: s.evs}
	}
	tag := p.claims.Tag()
	entry, err := p.claims.Write(ids, tag)
	if err != nil {
		for _, s := range subs {
			s.refuse(s.evs, fmt.Errorf("%w: %w", errNotSent, err))
		}
		release(0)
		return
	}
	cl := claim.Of(tag)
	p.send(sent, &cl, tag, release)
	ctx, cancel := context.WithTimeout(context.Background(), p.ackWait)
	defer cancel()
	_, held, err := p.claims.Decide(ctx, entry, ids, tag, false)
	switch {
	case err != nil && refusedForGood(err):
		// No entry: no writer stores the events.
		for _, s := range subs {
			s.refuse(s.evs, err)
		}
	case err != nil:
		// Not known here: the writers decide; the requests wait for
		// their outcomes.
		p.log.Debug("a claims log entry not decided by this copy", zap.Error(err))
	default:
		for i, s := range subs {
			if !held[i] {
				s.refuse(s.evs, claim.ErrTaken)
			}
		}
	}
}
