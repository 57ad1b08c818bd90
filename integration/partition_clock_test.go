package integration

import (
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
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
		fault: func(*testenv.Firewall, []*testenv.NATSProc, *testenv.NATSProc) func() {
			return testenv.StepClock(t, clockStep)
		}})
}

// The same, stepping back 10 minutes first: what is stored during the
// fault is stamped earlier than what was stored before it.
func TestPartitionClockStepsBack(t *testing.T) {
	natsFault(t, natsFaultCase{name: "clock-steps-back-10m", d: 15 * time.Second,
		fault: func(*testenv.Firewall, []*testenv.NATSProc, *testenv.NATSProc) func() {
			return testenv.StepClock(t, -clockStep)
		}})
}
