package settle

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/failure"
)

var testLimits = Limits{MaxDeliver: 5, RetryDelay: time.Second, RetryMaxDelay: 5 * time.Second, NotReadyDelay: 100 * time.Millisecond}

func TestPolicy(t *testing.T) {
	transient := errors.New("connection reset")
	permanent := fmt.Errorf("insert: %w", failure.AsPermanent(errors.New("type mismatch")))
	for _, tc := range []struct {
		name      string
		result    Result
		err       error
		keyed     bool
		delivered uint64
		want      Decision
	}{
		{"done", Done, nil, false, 1, Decision{Answer: AnswerOutcome, Action: Ack}},
		{"done keyed, redelivered", Done, nil, true, 4, Decision{Answer: AnswerOutcome, Action: Ack}},
		{"not ready", NotReady, nil, false, 2, Decision{Answer: NoAnswer, Action: Retry, Delay: 100 * time.Millisecond}},
		{"not ready at the limit", NotReady, nil, false, 5, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit}},
		{"store failed, unkeyed", StoreFailed, transient, false, 1, Decision{Answer: AnswerFailure, Action: Drop}},
		{"store failed, unkeyed, at the limit: still dropped", StoreFailed, transient, false, 5, Decision{Answer: AnswerFailure, Action: Drop}},
		{"store failed, keyed, first", StoreFailed, transient, true, 1, Decision{Answer: AnswerFailure, Action: Retry, Delay: time.Second}},
		{"store failed, keyed, third: backed off", StoreFailed, transient, true, 3, Decision{Answer: AnswerFailure, Action: Retry, Delay: 4 * time.Second}},
		{"store failed, keyed, fourth: capped", StoreFailed, transient, true, 4, Decision{Answer: AnswerFailure, Action: Retry, Delay: 5 * time.Second}},
		{"store failed, keyed, at the limit", StoreFailed, transient, true, 5, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit}},
		{"store rejected, unkeyed", StoreFailed, permanent, false, 1, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonPermanent}},
		{"store rejected, keyed", StoreFailed, permanent, true, 1, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonPermanent}},
		{"handoff failed", HandoffFailed, transient, false, 1, Decision{Answer: NoAnswer, Action: Retry, Delay: time.Second}},
		{"handoff failed, keyed, second", HandoffFailed, transient, true, 2, Decision{Answer: NoAnswer, Action: Retry, Delay: 2 * time.Second}},
		{"handoff failed at the limit", HandoffFailed, transient, false, 5, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit}},
		{"handoff impossible", HandoffFailed, permanent, false, 1, Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonPermanent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A back-off's delay is jittered: want.Delay is its cap.
			for range 50 {
				got := testLimits.Decide(tc.result, tc.err, tc.keyed, tc.delivered)
				if tc.result != NotReady && got.Delay <= tc.want.Delay {
					got.Delay = tc.want.Delay
				}
				if got != tc.want {
					t.Fatalf("Decide = %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// A throttled failure is retried as a transient one, no sooner than it
// asks, and the back-offs of one outage are spread, not equal.
func TestThrottledAndJittered(t *testing.T) {
	throttled := failure.AsThrottled(errors.New("too many parts"), 30*time.Second)
	d := testLimits.Decide(StoreFailed, throttled, true, 2)
	if d.Action != Retry || d.Answer != AnswerFailure || d.Delay != 30*time.Second {
		t.Errorf("throttled 30s: %+v, want a retry after 30s", d)
	}
	seen := map[time.Duration]bool{}
	for range 100 {
		seen[testLimits.Decide(StoreFailed, errors.New("reset"), true, 3).Delay] = true
	}
	if len(seen) < 50 {
		t.Errorf("100 back-offs took %d distinct delays: not jittered", len(seen))
	}
}

// Every result, kind and keyedness has its own rule: none falls through to
// Decide's fallback.
func TestPolicyCoversEveryCase(t *testing.T) {
	for _, result := range []Result{Done, NotReady, HandoffFailed, StoreFailed, Exhausted} {
		for _, kind := range []failure.Kind{failure.Transient, failure.Permanent} {
			for _, keyed := range []bool{false, true} {
				found := false
				for _, r := range Policy {
					failed := result == HandoffFailed || result == StoreFailed
					if (r.Result == result || (r.Result == anyFailure && failed)) && (!failed || r.Kind == kind) &&
						!(r.keyed == keyedOnly && !keyed) && !(r.keyed == unkeyedOnly && keyed) {
						found = true
						if r.Why == "" {
							t.Errorf("rule %+v says not why", r)
						}
						break
					}
				}
				if !found {
					t.Errorf("no rule for result %d, kind %d, keyed %v", result, kind, keyed)
				}
			}
		}
	}
}

// A poison message goes to the dead letters, its requests answered as
// failed, whatever its kind and delivery count.
func TestExhaustedIsDeadLettered(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		want := Decision{Answer: AnswerFailure, Action: DeadLetter, Reason: ReasonDeliveryLimit}
		if d := testLimits.Decide(Exhausted, nil, keyed, 6); d != want {
			t.Fatalf("keyed %v: %+v, want %+v", keyed, d, want)
		}
	}
}
