package diag

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Run reports every Interval until ctx ends, then reports what is left.
func (t *Tally) Run(ctx context.Context) error {
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			t.flush(last)
			cancel()
			return nil
		case <-tick.C:
			t.flush(ctx)
		}
	}
}

func (t *Tally) flush(ctx context.Context) {
	for _, r := range t.take() {
		if err := t.send(ctx, r); err != nil {
			t.dropped.Add(uint64(len(r.Counts) + len(r.Keys)))
			t.log.Warn("diagnostics report not sent", zap.Int("counts", len(r.Counts)), zap.Error(err))
		}
	}
}

// Publisher sends reports to subject of the diagnostics stream.
func Publisher(js jetstream.JetStream, subject string) func(context.Context, Report) error {
	return func(ctx context.Context, r Report) error {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = js.Publish(ctx, subject, b)
		return err
	}
}

// Register exports the Tally's dropped count as <namespace>_diag_dropped_total.
func (t *Tally) Register(reg prometheus.Registerer, namespace string) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "diag_dropped_total",
		Help: "Diagnostics counts (answers, unmatched keys) the bounds kept out or that could not be sent."},
		func() float64 { return float64(t.Dropped()) }))
}
