package settle

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

var testLimits = Limits{MaxDeliver: 5, RetryDelay: time.Second, RetryMaxDelay: 5 * time.Second, NotReadyDelay: 100 * time.Millisecond}

func TestPolicy(t *testing.T) {
	transient := errors.New("connection reset")
	permanent := fmt.Errorf("insert: %w", AsPermanent(errors.New("type mismatch")))
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
			if got := testLimits.Decide(tc.result, tc.err, tc.keyed, tc.delivered); got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Every result, kind and keyedness has its own rule: none falls through to
// Decide's fallback.
func TestPolicyCoversEveryCase(t *testing.T) {
	for _, result := range []Result{Done, NotReady, HandoffFailed, StoreFailed} {
		for _, kind := range []Kind{Transient, Permanent} {
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
					t.Errorf("no rule for result %d, %s, keyed %v", result, kind, keyed)
				}
			}
		}
	}
}

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

func TestExhausted(t *testing.T) {
	if testLimits.Exhausted(5) || !testLimits.Exhausted(6) {
		t.Fatal("a message is exhausted only once delivered more than MaxDeliver times")
	}
}
