package janitor

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

// On a server west of UTC (America/Los_Angeles, 8 h behind in winter), a
// sweep keeps every idempotency record inside IDEMPOTENCY_WINDOW and every
// reading inside its period, and drops those past them: in the tables this
// release creates (partitions of UTC) and in tables created by 1.0.0
// (partitions in the server's zone, which an upgrade keeps).
func TestSweepOnAServerWestOfUTC(t *testing.T) {
	addr := testenv.OwnClickHouse(t, "America/Los_Angeles")
	old, err := os.ReadFile("../../schema/testdata/1.0.0.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, release := range []string{"this release", "1.0.0"} {
		t.Run(release, func(t *testing.T) {
			db := testenv.FreshDB(t, addr)
			s, err := chstore.Open(chstore.Config{URL: "clickhouse://default@" + addr + "/" + db})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			if release == "1.0.0" {
				for _, stmt := range schema.Release(string(old), db) {
					if err := s.Conn().Exec(ctx, stmt); err != nil {
						t.Fatalf("the 1.0.0 schema: %v", err)
					}
				}
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			sweepWestOfUTC(t, s, db)
		})
	}
}

func sweepWestOfUTC(t *testing.T, s *chstore.Store, db string) {
	ctx := context.Background()
	at := func(v string) time.Time {
		tm, err := time.Parse(time.DateTime, v)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// Now, 11 March 2024 at 00:30 UTC: the idempotency window (24 h)
	// starts at 00:30 UTC on the 10th, 16:30 on the 9th in Los Angeles.
	now := at("2024-03-11 00:30:00")
	keys := []chstore.KeyRow{
		// 23:00 on the 9th in Los Angeles, inside the window.
		{EventID: "inside", TsNs: at("2024-03-10 07:00:00").UnixNano()},
		// 22:00 on the 8th in Los Angeles, past it.
		{EventID: "past", TsNs: at("2024-03-09 06:00:00").UnixNano()},
	}
	if err := s.InsertKeys(ctx, keys); err != nil {
		t.Fatal(err)
	}
	// Readings kept 10 days: from 00:30 UTC on 1 March, 16:30 on 29
	// February in Los Angeles.
	var rows []chstore.ValueRow
	for id, ts := range map[string]string{"inside": "2024-03-01 05:00:00", "past": "2024-01-31 12:00:00"} {
		rows = append(rows, chstore.ValueRow{Entity: "e", Input: "i", TsNs: at(ts).UnixNano(), ReceivedNs: at(ts).UnixNano(),
			Serial: "s", DeviceInput: "i", EventID: id, JSON: []byte("1")})
	}
	if err := s.InsertValues(ctx, rows); err != nil {
		t.Fatal(err)
	}
	periods := retention.Defaults()
	periods[retention.Readings] = 10 * retention.Day
	j := New(s, periods, 24*time.Hour, nil, zap.NewNop())
	s.SetRolledUp(now.UnixNano())
	if _, err := j.Sweep(ctx, now); err != nil {
		t.Fatal(err)
	}
	found, err := s.KeyOutcomes(ctx, []string{"inside", "past"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range found {
		ids = append(ids, k.EventID)
	}
	if !slices.Equal(ids, []string{"inside"}) {
		t.Errorf("idempotency records after the sweep: %q, want [inside] (a retry of a key inside the window must find its outcome)", ids)
	}
	var left []string
	if err := s.Conn().QueryRow(ctx, "SELECT groupArray(event_id) FROM (SELECT event_id FROM "+db+".input_values ORDER BY event_id)").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"inside"}) {
		t.Errorf("readings after the sweep: %q, want [inside]", left)
	}
}
