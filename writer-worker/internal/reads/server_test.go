package reads

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/query"
)

// An answer is sized to the connection's max payload: values as stored
// (no HTML escaping), and one that cannot fit is an error at once, not a
// reply that NATS drops while the asker waits out its timeout.
func TestAnswersFitTheConnection(t *testing.T) {
	ns := testenv.NATSControlWith(t, bus.DefaultNames, func(o *server.Options) { o.MaxPayload = 64 << 10 })
	nc, err := nats.Connect(ns.ClientURL(), testenv.Operator())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := query.Budget(nc.MaxPayload()); got != 32<<10 {
		t.Errorf("budget on a 64 KiB connection: %d, want 32 KiB", got)
	}
	s := New(nc, "q.", nil, nil, zap.NewNop())
	angle := json.RawMessage(`"` + strings.Repeat("<", 30<<10) + `"`)
	b, err := s.encode(query.Response{Points: []query.Point{{TS: "t", Value: angle}}}, nil)
	if err != nil || len(b) > 31<<10 {
		t.Errorf("30 KiB of '<': %d bytes, %v; want it as stored", len(b), err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 70<<10) + `"`)
	if _, err := s.encode(query.Response{Points: []query.Point{{TS: "t", Value: big}}}, nil); err == nil || !strings.Contains(err.Error(), "over the 65536 a NATS message holds") {
		t.Errorf("an answer over the max payload: %v", err)
	}
}
