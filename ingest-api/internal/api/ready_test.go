package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// /readyz is on the device port: when the storage path fails it names the
// condition, and the cause (ClickHouse's address and text) goes to the log.
func TestReadyzNamesTheConditionNotTheInternals(t *testing.T) {
	nc, js := testenv.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := registry.Open(ctx, js, registry.BucketConfig{Bucket: "ready_registry", Replicas: 1}, registry.NewCache(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = store.Run(ctx) }()
	const cause = "dial tcp 10.9.8.7:9000: connect: connection refused"
	sub, err := nc.Subscribe(bus.DefaultNames.QueryPrefix()+query.Ping, func(m *nats.Msg) {
		b, _ := json.Marshal(query.Response{Error: cause})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	core, logs := observer.New(zap.InfoLevel)
	e, s := New(Deps{Log: zap.New(core), Registry: store,
		Query:  query.NewClient(nc, bus.DefaultNames.QueryPrefix(), time.Second),
		Limits: Limits{MaxBodyBytes: 1 << 10, MaxInFlight: 4}})
	go func() { _ = s.WatchReady(ctx) }()

	var b Body
	for deadline := time.Now().Add(20 * time.Second); ; {
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		b = Body{}
		_ = json.Unmarshal(rec.Body.Bytes(), &b)
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz answered %d with the storage path failing", rec.Code)
		}
		if b.Error != "not checked yet" && b.Error != "registry not loaded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness never got to the storage path: %+v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.Message != "not ready" || b.Error != "storage unreachable" {
		t.Errorf("/readyz = %+v, want not ready / storage unreachable (no address, no server text)", b)
	}
	logged := func() bool {
		for _, l := range logs.FilterMessage("not ready").All() {
			if e, _ := l.ContextMap()["error"].(string); strings.Contains(e, "10.9.8.7:9000") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); !logged(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cause, with ClickHouse's text, was not logged")
		}
	}
}
