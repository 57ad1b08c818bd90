package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// FollowKV hands every entry of kv to apply until ctx ends: first the
// bucket's whole contents, then synced is called, then every change as it
// happens. It is how each process keeps its copy of a bucket (the
// registry, the admin keys) current.
func FollowKV(ctx context.Context, kv jetstream.KeyValue, apply func(jetstream.KeyValueEntry), synced func()) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.Bucket(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil
			case e == nil:
				synced()
			default:
				apply(e)
			}
		}
	}
}
