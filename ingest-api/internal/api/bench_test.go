package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/diag"

	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// BenchmarkRequestPath: what ingest-api does per request besides HTTP and
// NATS I/O: parse and check the body, look up and authenticate the device,
// encode the event.
func BenchmarkRequestPath(b *testing.B) {
	keys, err := registry.NewKeyring("bench-token-key-0123456789abcdef0123456789", "")
	if err != nil {
		b.Fatal(err)
	}
	d := registry.Device{Serial: "bench-00001", ConnectionType: registry.ConnectionAPI,
		Inputs: []registry.Input{{Name: "v", Entity: "bench-entity", EntityInput: "v"}}}
	if _, err := d.AddToken(keys, "", "bt-1234abcd-00001", time.Now()); err != nil {
		b.Fatal(err)
	}
	c := registry.NewCache()
	c.Put(d, 1)
	body := []byte(`{"serial":"bench-00001","data":{"v":21.5}}`)
	header := "Bearer bt-1234abcd-00001"
	out := make([]byte, 0, 512)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tok := edge.Bearer(header)
		req, code := parse(body, tok)
		if code != outcome.Stored {
			b.Fatal(code)
		}
		dev, ok := c.Lookup(req.Serial)
		if !ok {
			b.Fatal("no device")
		}
		if _, ok := dev.Authenticate(keys, tok, req.BodyToken); !ok {
			b.Fatal("not authenticated")
		}
		ev := event.Event{ID: "0b6f5c2e-7a0e-4d6b-9c1f-000000000001", Serial: req.Serial, ReceivedNs: 1, Rev: dev.Rev,
			Reply: "devices.reply.abcdefghijklmnopqrstuv", Payload: req.Payload}
		out = event.AppendEvent(out[:0], &ev)
	}
}

// BenchmarkRejectionAccounting: the whole handler for a request refused
// for a wrong token (in-process, no network), without and with the
// diagnostics Tally counting it; the ratio of the two is what the
// accounting costs per rejection (target: at most 5% more).
func BenchmarkRejectionAccounting(b *testing.B) {
	for _, tallied := range []bool{false, true} {
		name := "untallied"
		if tallied {
			name = "tallied"
		}
		b.Run(name, func(b *testing.B) {
			d := Deps{Log: zap.NewNop(), Registry: &registry.Store{},
				Limits: Limits{MaxBodyBytes: 1 << 20, MaxInFlight: 4, BodyTimeout: time.Minute}}
			if tallied {
				d.Tally = diag.NewTally(diag.DefaultLimits, func(context.Context, diag.Report) error { return nil }, zap.NewNop())
			}
			e, s := New(d)
			s.cache = registry.NewCache()
			const devices = 1000
			bodies := make([]string, devices)
			for i := range devices {
				serial := fmt.Sprintf("dev-%04d", i)
				s.cache.Put(registry.Device{Serial: serial, ConnectionType: registry.ConnectionAPI, AccessToken: "tok"}, 1)
				bodies[i] = `{"serial":"` + serial + `","data":{"v":1}}`
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/deviceapi/event", strings.NewReader(bodies[i%devices]))
				req.Header.Set("Authorization", "Bearer wrong")
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusUnauthorized {
					b.Fatal(rec.Code, rec.Body.String())
				}
				i++
			}
		})
	}
}
