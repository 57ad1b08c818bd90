package integration

import (
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// clockStep is longer than the pipeline window (bus.PipelineWindow, 2
// min): stepped forward, every claim and every entry of the mapped
// stream's duplicate window is past its age at once; stepped back, the
// ones taken before the step live that much longer.
const clockStep = 10 * time.Minute

// The machine's wall clock steps 10 minutes forward (a VM resumed, an NTP
// server that was wrong) under the fleet, stays there 15 s, and steps back
// (the error corrected): every process sees both steps, the NATS nodes,
// ClickHouse and every program copy alike.
func TestPartitionClockStepsForward(t *testing.T) {
	natsFault(t, natsFaultCase{name: "clock-steps-forward-10m", d: 15 * time.Second,
		fault: func(_ *testenv.Firewall, _ []*testenv.NATSProc, leader *testenv.NATSProc) func() {
			return stepClock(t, leader, clockStep)
		}})
}

// The same, stepping back 10 minutes first: what is stored during the
// fault is stamped earlier than what was stored before it.
func TestPartitionClockStepsBack(t *testing.T) {
	natsFault(t, natsFaultCase{name: "clock-steps-back-10m", d: 15 * time.Second,
		fault: func(_ *testenv.Firewall, _ []*testenv.NATSProc, leader *testenv.NATSProc) func() {
			return stepClock(t, leader, -clockStep)
		}})
}

// stepClock steps the clock by d and returns the step back, which first
// checks that the cluster saw the step (else the fault was not done): the
// newest claim's server stamp at the heal (the fleet's keyed requests take
// claims all along) is d, give or take a minute, from the newest before
// the step.
func stepClock(t *testing.T, node *testenv.NATSProc, d time.Duration) func() {
	before := claimsStamp(t, node)
	back := testenv.StepClock(t, d)
	return func() {
		during := claimsStamp(t, node)
		moved := during.Sub(before) // wall clock: the stamps carry no monotonic reading
		t.Logf("the newest claim's stamp moved %s across the step", moved.Round(time.Second))
		if moved < d-time.Minute || moved > d+time.Minute {
			t.Errorf("the newest claim's stamp moved %s across a step of %s: did the servers see the step?", moved, d)
		}
		back()
	}
}

// claimsStamp is the server's stamp of the newest claim, as node says
// (zero, and the test failed, when it does not answer).
func claimsStamp(t *testing.T, node *testenv.NATSProc) time.Time {
	info := askStream(node.ClientURL(), bus.DefaultNames.ClaimsStream)
	if info == nil {
		t.Errorf("%s did not answer about %s", node.Name(), bus.DefaultNames.ClaimsStream)
		return time.Time{}
	}
	return info.State.LastTime
}
