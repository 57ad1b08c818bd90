package submit

import "github.com/devicehub/eventservice/pkg/event"

// submission is one request's events on their way into the events stream:
// they travel in one message, shared with the submissions of concurrent
// requests. Keyed and unkeyed submissions never share one, so that every
// message, and the envelope the mapper makes of it, is settled by one rule.
type submission struct {
	evs []*event.Event
	// claim is the id a keyed submission takes its claim on: one claim
	// for the request, whatever its number of events ("": unkeyed).
	claim string
	size  int // the events' event.EnvelopeCost, summed once
	// refused hears, at most once, that the events did not enter the
	// stream: claim.ErrTaken when another attempt holds the claim.
	refused chan refusal
}

// refusal names events that did not enter the stream, and why.
type refusal struct {
	ids []string
	err error
}

// refuse tells s its events did not enter the stream; only the first word
// counts (a keyed submission carried on after its claim's answer was lost
// may be refused again).
func (s *submission) refuse(evs []*event.Event, err error) {
	ids := make([]string, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	select {
	case s.refused <- refusal{ids: ids, err: err}:
	default:
	}
}

func newSubmission(evs []*event.Event, claim string) *submission {
	s := &submission{evs: evs, claim: claim, refused: make(chan refusal, 1)}
	for _, ev := range evs {
		s.size += event.EnvelopeCost(ev)
	}
	return s
}

func (s *submission) keyed() bool { return s.claim != "" }

func (s *submission) cost() int { return s.size }
