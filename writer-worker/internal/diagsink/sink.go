// Package diagsink stores the diagnostics reports (pkg/diag) that
// ingest-api and mapper-worker send: a few reports per insert, acked once
// stored.
package diagsink

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/batcher"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/diag"
	"github.com/devicehub/eventservice/pkg/failure"
	"github.com/devicehub/eventservice/pkg/retry"
	"github.com/devicehub/eventservice/pkg/settle"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Reports are batched for up to linger, at most maxReports a batch.
const (
	linger     = 2 * time.Second
	maxReports = 256
	timeout    = 30 * time.Second
	// partRetry is the first wait before trying the tables a partly stored
	// batch still misses again (doubled each time, within timeout).
	partRetry = 500 * time.Millisecond
)

// Sink consumes the diagnostics stream into ClickHouse.
type Sink struct {
	js     jetstream.JetStream
	names  bus.Names
	store  *chstore.Store
	settle *settle.Settler
	log    *zap.Logger
}

// New returns a Sink; Run starts it. Its messages are settled by the one
// policy (pkg/settle) under limits.
func New(js jetstream.JetStream, names bus.Names, limits settle.Limits, store *chstore.Store, namespace string, reg prometheus.Registerer, log *zap.Logger) *Sink {
	return &Sink{js: js, names: names, store: store, log: log,
		settle: settle.New(js, names, limits, namespace+"_diag", reg, log)}
}

// Run consumes until ctx ends, then stores what it holds.
func (s *Sink) Run(ctx context.Context) error {
	return bus.ConsumeBatches(ctx, s.js, bus.Durable{Stream: s.names.DiagStream, Name: s.names.DiagConsumer,
		ConsumerConfig: bus.ConsumerConfig{MaxAckPending: 4 * maxReports, PullBatch: maxReports, AckWait: time.Minute}},
		s.log, batcher.Config{MaxItems: maxReports, Linger: linger}, func(b *batcher.Batch[jetstream.Msg], release func(time.Duration)) {
			s.flush(b.Items)
			release(0)
		})
}

// flush stores one batch of reports, within timeout in all (as long as one
// insert may take, so that the reports waiting behind it are not
// redelivered meanwhile). A report that cannot be read is a dead letter; a
// failed insert is retried, as a keyed event's is: nothing else would send
// the counts again. But once a table holds the batch's rows, the rest are
// retried here until the timeout, then dropped (logged): redelivered, the
// batch would add its counts to the summing tables twice.
func (s *Sink) flush(msgs []jetstream.Msg) {
	var reports []diag.Report
	var taken []*settle.Msg
	for _, m := range msgs {
		sm := s.settle.Take(m)
		sm.SetKeyed(true)
		if sm.Exhausted() {
			sm.Settle(settle.Exhausted, nil)
			continue
		}
		var r diag.Report
		if err := json.Unmarshal(m.Data(), &r); err != nil || r.Format != diag.Format {
			sm.Settle(settle.StoreFailed, failure.AsPermanent(fmt.Errorf("unreadable diagnostics report (format %d): %v", r.Format, err)))
			continue
		}
		reports, taken = append(reports, r), append(taken, sm)
	}
	if len(reports) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done, err := s.store.InsertDiag(ctx, reports, 0)
	if err != nil && done > 0 {
		// Part of the tables are written: the rest is tried again here,
		// since a redelivery would write the first ones twice.
		s.log.Warn("diagnostics partly stored, storing the rest", zap.Int("tables", done), zap.Error(err))
		err = retry.Backoff{Initial: partRetry, Max: timeout}.Do(ctx, func(ctx context.Context) (err error) {
			done, err = s.store.InsertDiag(ctx, reports, done)
			return err
		}, nil)
	}
	result := settle.Done
	switch {
	case err != nil && done > 0:
		s.log.Warn("diagnostics partly stored, the rest dropped", zap.Int("reports", len(reports)), zap.Int("tables", done), zap.Error(err))
		err = nil
	case err != nil:
		result = settle.StoreFailed
		s.log.Warn("diagnostics not stored", zap.Int("reports", len(reports)), zap.Error(err))
	}
	for _, sm := range taken {
		sm.Settle(result, err)
	}
}
