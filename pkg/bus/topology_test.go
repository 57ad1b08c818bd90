package bus

import "testing"

// Both kinds of claim mark a message's events as claimed; anything else,
// a copy that sets nothing included, does not: its events are looked up.
func TestClaimedReadsBothKindsOfClaim(t *testing.T) {
	for value, want := range map[string]bool{ClaimedByEvent: true, ClaimedByRequest: true, "": false, "0": false, "3": false, "true": false} {
		if got := Claimed(value); got != want {
			t.Errorf("Claimed(%q) = %v, want %v", value, got, want)
		}
	}
	if ClaimedByEvent != "1" {
		t.Fatalf("ClaimedByEvent is %q: writers of earlier releases read \"1\"", ClaimedByEvent)
	}
}
