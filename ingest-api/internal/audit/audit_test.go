package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/audit"
	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// A copy of ingest-api started with a shorter audit period (RETENTION=
// audit=1h) opens the trail as it is: the stream keeps its period and every
// record.
func TestShorterRetentionLeavesTheTrailWhole(t *testing.T) {
	srv := testenv.NATSControl(t)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("ingest-api", testenv.NATSPassword("ingest-api")),
		nats.CustomInboxPrefix(bus.Inbox("ingest-api")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := bus.DefaultNames
	const year = 365 * 24 * time.Hour
	first, err := audit.Open(ctx, js, names, 1, year, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"A", "B", "C"} {
		if err := first.Record(ctx, audit.Record{Actor: "admin", Action: "device.create", Target: target}); err != nil {
			t.Fatal(err)
		}
	}

	second, err := audit.Open(ctx, js, names, 1, time.Hour, zap.NewNop())
	if err != nil {
		t.Fatalf("a copy with a shorter audit period does not start: %v", err)
	}
	info, err := testenv.OperatorJS(t, srv.ClientURL()).Stream(ctx, names.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().Config.MaxAge; got != year {
		t.Errorf("the trail's max age is %s after a copy started with 1h, want %s", got, year)
	}
	recs, _, err := second.List(ctx, audit.Filter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Errorf("the trail holds %d records, want 3", len(recs))
	}
}
