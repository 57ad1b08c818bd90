package chstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/query"
)

// BenchmarkDiagnosticsOfABusyDevice: the diagnostics of one device that
// sent 1,000,000 messages in the last day (11.6 a second, 1 in 100 with a
// refused time), among the counts, rejections and keys such a device
// leaves. Target: p50 of 20 queries at most 200 ms (reported as p50_ms).
func BenchmarkDiagnosticsOfABusyDevice(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	const n = 1_000_000
	now := time.Now()
	startNs := now.Add(-24 * time.Hour).UnixNano()
	step := int64(24*time.Hour) / n
	// Generated in ClickHouse: rows as the writer stores them. Readings are
	// 0-9 s late; every 100th was refused its time.
	if err := s.pipe.conn().Exec(ctx, "INSERT INTO "+s.db+".device_messages (serial, ts_ns, event_id, payload, outcome, reading_ns, time_note, token) "+
		"SELECT 'busy', toInt64(? + number * ?), toString(number), concat('{\"serial\":\"busy\",\"data\":{\"temp\":', toString(number % 40), '}}'), "+
		"'Message processed and data stored successfully', toInt64(? + number * ? - if(number % 100 = 0, 0, (number % 10) * 1000000000)), "+
		"if(number % 100 = 0, 'data.at is not a time: stored at receive time', ''), 'token-1' FROM system.numbers LIMIT ?",
		startNs, step, startNs, step, n); err != nil {
		b.Fatal(err)
	}
	var reports []diag.Report
	for m := now.Add(-24*time.Hour).Unix() / 60 * 60; m < now.Unix(); m += 60 {
		reports = append(reports, diag.Report{Format: diag.Format, Minute: m,
			Counts:     []diag.Count{{Serial: "busy", Kind: "stored", Requests: 694, Readings: 694}, {Serial: "busy", Kind: "rate_limited", Requests: 3, Readings: 3}},
			Seen:       []diag.Seen{{Serial: "busy", LastNs: m * 1e9, Kind: "stored"}},
			Rejections: []diag.Rejection{{Serial: "busy", AtNs: m * 1e9, Kind: "rate_limited", Message: "Rate limit exceeded", Source: "10.0.0.1"}},
			Keys:       []diag.Key{{Serial: "busy", Key: "humidity", Count: 694, LastNs: m * 1e9, LastValue: "41"}},
		})
	}
	if _, err := s.InsertDiag(ctx, reports, 0); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range 20 {
			t0 := time.Now()
			d, err := s.Diagnostics(ctx, "busy", now.Add(-24*time.Hour).UnixNano(), now.UnixNano())
			took = append(took, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			if rt := d.ReadingTime; rt.Messages != n || rt.Timed != n-n/100-n/10+n/100 || rt.LateMaxMs != 9000 || len(d.Keys) != 1 || len(d.Counts) != 2 {
				b.Fatalf("diagnostics %+v", d)
			}
		}
	}
	testenv.ReportLatency(b, took)
}

// A device is silent once it sent nothing for five of its usual intervals
// (and 5 minutes); one that reports hourly is not silent after two hours,
// nor one that just sent; one provisioned serial with too few requests is
// left out. Unknown serials and the most rejected come from the counts.
func TestFleet(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	now := time.Now()
	minute := func(ago time.Duration) int64 { return now.Add(-ago).Unix() / 60 * 60 }
	var reports []diag.Report
	add := func(ago time.Duration, serial, kind string, n uint64) {
		reports = append(reports, diag.Report{Format: diag.Format, Minute: minute(ago),
			Counts: []diag.Count{{Serial: serial, Kind: kind, Requests: n, Readings: n}},
			Seen:   []diag.Seen{{Serial: serial, LastNs: now.Add(-ago).UnixNano(), Kind: kind}}})
	}
	for ago := 3 * time.Hour; ago >= time.Hour; ago -= time.Minute {
		add(ago, "quiet", "stored", 1) // every minute, until an hour ago
	}
	for ago := 6 * time.Hour; ago >= 2*time.Hour; ago -= time.Hour {
		add(ago, "hourly", "stored", 1)
	}
	for ago := 10 * time.Minute; ago >= 0; ago -= time.Minute {
		add(ago, "chatty", "stored", 6)
	}
	add(2*time.Hour, "rare", "stored", 2)
	add(5*time.Minute, "chatty", "invalid_token", 4)
	add(90*time.Minute, "quiet", "rate_limited", 7)
	add(3*time.Minute, "ghost", "device_not_found", 9)
	add(2*time.Minute, "", "device_not_found", 50)
	for ago := 10 * 24 * time.Hour; ago >= 8*24*time.Hour; ago -= time.Hour {
		add(ago, "gone", "stored", 1) // hourly, until 8 days ago
	}
	// More serials quiet for 5-15 minutes than the view lists, and as many
	// unknown ones: neither pushes the long-silent devices out.
	for i := range 1200 {
		add(6*time.Minute, fmt.Sprintf("noise-%d", i), "device_not_found", 1)
		for ago := 15 * time.Minute; ago >= 6*time.Minute; ago -= 3 * time.Minute {
			add(ago, fmt.Sprintf("fresh-%d", i), "stored", 1)
		}
	}
	if _, err := s.InsertDiag(ctx, reports, 0); err != nil {
		t.Fatal(err)
	}
	f, err := s.Fleet(ctx, now.Add(-24*time.Hour).UnixNano(), now.UnixNano(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Silent) != 2 || f.Silent[0].Serial != "quiet" || f.Silent[0].Requests != 121 || f.Silent[0].IntervalS < 55 || f.Silent[0].IntervalS > 65 ||
		f.Silent[0].LastSeen != query.FormatNs(now.Add(-time.Hour).UnixNano()) {
		t.Errorf("silent %+v, want quiet (121 requests a minute apart, last an hour ago), then gone", f.Silent)
	} else if g := f.Silent[1]; g.Serial != "gone" || g.Requests != 49 || g.IntervalS < 3500 || g.IntervalS > 3700 {
		t.Errorf("silent %+v, want gone (49 requests an hour apart)", g)
	}
	if len(f.MostRejected) != 2 || f.MostRejected[0].Serial != "quiet" || f.MostRejected[0].Requests != 7 || f.MostRejected[1].Serial != "chatty" {
		t.Errorf("most rejected %+v", f.MostRejected)
	}
	if len(f.Unknown) != maxFleet || f.Unknown[0].Serial != "ghost" || f.Unknown[0].Requests != 9 ||
		f.Unknown[0].LastSeen != query.FormatNs(now.Add(-3*time.Minute).UnixNano()) || f.UnknownUntracked != 50 {
		t.Errorf("unknown %d: first %+v, untracked %d; want %d, ghost first", len(f.Unknown), f.Unknown[0], f.UnknownUntracked, maxFleet)
	}
}
