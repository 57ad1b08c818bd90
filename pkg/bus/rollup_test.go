package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/registry"
)

// A program that may write a bucket may not empty it: a message with
// "Nats-Rollup: all" (a purge of the whole stream, sent as a write) is
// refused, and the registry keeps every device.
func TestAProgramCannotRollUpABucket(t *testing.T) {
	srv := testenv.NATSControl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, js, err := bus.Open(ctx, programConfig(srv.ClientURL(), "ingest-api", time.Hour), "ingest-api", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bucket := bus.DefaultNames.RegistryBucket
	if _, err := registry.Open(ctx, js, registry.BucketConfig{Bucket: bucket, Replicas: 1}, registry.NewCache(), zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := kv.Put(ctx, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	m := nats.NewMsg("$KV." + bucket + ".z")
	m.Header.Set(nats.MsgRollup, nats.MsgRollupAll)
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Error("a rollup of the whole registry was accepted")
	}
	st, err := testenv.OperatorJS(t, srv.ClientURL()).Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 3 {
		t.Errorf("the registry holds %d records, want 3", n)
	}
}
