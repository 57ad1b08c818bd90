package batch

import (
	"fmt"
	"testing"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// A device whose reading could not be stored hears the contract's
// "storage error: " and the condition: not ClickHouse's address or text.
func TestAStorageFailureAnswerNamesTheConditionOnly(t *testing.T) {
	r := newRig(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens
	down, err := chstore.Open(chstore.Config{URL: "clickhouse://default@" + addr + "/" + r.db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() }) // after the writer stops (r.run's cleanup runs first)
	r.store = down
	sub, err := r.nc.SubscribeSync("test.down.>")
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, testCfg)
	r.publish(t, "env-d", withReply(mapped("d-1", outcome.Stored, `5`), "test.down.d"))
	rep := nextReply(t, sub)
	if rep.Code != outcome.StorageFailed || rep.Detail != "storage error: storage unreachable" {
		t.Errorf("answer %v %q, want storage_failed %q", rep.Code, rep.Detail, "storage error: storage unreachable")
	}
}
