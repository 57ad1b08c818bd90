package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/failure"
)

// A stream's limits are set once, when it is created: a program creates a
// missing stream (or bucket) with its configured limits and never changes
// an existing one (its NATS user may not: see Users). A copy started with
// other limits, shorter RETENTION=audit say, logs what differs and keeps
// running on the stream as it is; the operator changes limits with the
// operator's user (docs/operations.md, "Stream limits").

// EnsureStream creates the stream sc describes, or opens it as it is when
// it exists with another configuration, logging each difference.
// An existing stream is looked up before anything is created: the server
// checks a create's storage reservation before it finds the stream exists,
// so creating an existing stream on a store that holds it (but not a
// second copy of its limit) is refused for want of storage. A create that
// fails because another copy created the stream meanwhile opens that one.
func EnsureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, log *zap.Logger) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, sc)
		if err == nil {
			return st, nil
		}
		var again error
		if st, again = js.Stream(ctx, sc.Name); again != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	reportDifferences(sc, st.CachedInfo().Config, log)
	return st, nil
}

// EnsureBucket is EnsureStream for a KV bucket. Its stream is laid out as
// the client library lays out a bucket, but refuses rollups: a message with
// "Nats-Rollup: all", which any user who may write the bucket can send,
// would otherwise purge the whole bucket (a key is deleted, never purged,
// here).
func EnsureBucket(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig, log *zap.Logger) (jetstream.KeyValue, error) {
	if _, err := EnsureStream(ctx, js, bucketStream(kc), log); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, kc.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// The stream exists (just ensured): in a cluster, the server asked
		// may not know of it yet when another copy created it a moment ago.
		// Seen: writer-worker exiting at start beside a new ingest-api.
		return nil, failure.AsThrottled(err, 250*time.Millisecond)
	}
	return kv, err
}

// bucketStream is the stream of bucket kc (nats.go's layout, kv.go
// prepareKeyValueConfig, without rollups).
func bucketStream(kc jetstream.KeyValueConfig) jetstream.StreamConfig {
	dups := 2 * time.Minute
	if kc.TTL > 0 && kc.TTL < dups {
		dups = kc.TTL
	}
	return jetstream.StreamConfig{Name: "KV_" + kc.Bucket, Description: kc.Description, Subjects: []string{"$KV." + kc.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(kc.History, 1)), MaxBytes: orUnlimited(kc.MaxBytes), MaxAge: kc.TTL,
		MaxMsgSize: int32(orUnlimited(int64(kc.MaxValueSize))), Storage: kc.Storage, Replicas: max(kc.Replicas, 1),
		DenyDelete: true, Duplicates: dups, MaxMsgs: -1, MaxConsumers: -1, AllowDirect: true, Discard: jetstream.DiscardNew}
}

func orUnlimited(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// reportDifferences logs, once per start, each limit of the stream that is
// not what this copy was configured with.
func reportDifferences(want, have jetstream.StreamConfig, log *zap.Logger) {
	for _, d := range Differences(want, have) {
		log.Warn("stream limit differs from this copy's configuration: the stream keeps its own (an operator changes it)",
			zap.String("stream", have.Name), zap.String("limit", d.Limit),
			zap.String("configured", d.Configured), zap.String("stream_has", d.Has))
	}
}

// Difference is one limit whose configured value the stream does not have.
type Difference struct {
	Limit, Configured, Has string
}

// Differences lists the limits of want that have lacks (unset limits of
// want, 0 or empty, are not compared: the server's defaults fill them).
func Differences(want, have jetstream.StreamConfig) []Difference {
	var out []Difference
	add := func(limit string, configured, has any, set bool) {
		c, h := fmt.Sprint(configured), fmt.Sprint(has)
		if set && c != h {
			out = append(out, Difference{limit, c, h})
		}
	}
	add("max_age", want.MaxAge, have.MaxAge, want.MaxAge != 0)
	add("max_bytes", want.MaxBytes, have.MaxBytes, want.MaxBytes != 0)
	add("max_msgs", want.MaxMsgs, have.MaxMsgs, want.MaxMsgs != 0)
	add("max_msgs_per_subject", want.MaxMsgsPerSubject, have.MaxMsgsPerSubject, want.MaxMsgsPerSubject != 0)
	add("max_msg_size", want.MaxMsgSize, have.MaxMsgSize, want.MaxMsgSize != 0)
	add("replicas", want.Replicas, have.Replicas, want.Replicas != 0)
	add("duplicate_window", want.Duplicates, have.Duplicates, want.Duplicates != time.Duration(0))
	add("retention", want.Retention, have.Retention, true)
	add("discard", want.Discard, have.Discard, true)
	add("storage", want.Storage, have.Storage, true)
	add("subjects", want.Subjects, have.Subjects, len(want.Subjects) > 0)
	add("allow_rollup", want.AllowRollup, have.AllowRollup, true)
	return out
}
