package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/retention"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
	"github.com/devicehub/eventservice/writer-worker/internal/janitor"
)

const retentionUsage = `usage: writer-worker retention [-set KIND=PERIOD,...]

prints the retention periods every writer copy sweeps with, as recorded in
ClickHouse (retention_periods) by the first copy to start: one JSON line,
kind to period. -set records an operator's (readings, minutes, hours,
messages, diagnostics, idempotency; periods in d, y or h); the copies sweep
with them from their next start. Shortening a period drops, at that sweep,
everything older for good. RETENTION and IDEMPOTENCY_WINDOW only name what
a deployment's first copy records. It takes the worker's ClickHouse settings.`

// retentionCommand is the operator's subcommand to read or set the
// recorded retention periods.
func retentionCommand(args []string, out io.Writer) error {
	var ch chstore.Config
	var set string
	fs := envflag.New("writer-worker retention")
	ch.Register(fs)
	fs.FS.StringVar(&set, "set", "", "periods to record, kind=period,...")
	if err := fs.Parse(args); err != nil {
		return errors.Join(err, errors.New(retentionUsage))
	}
	if err := ch.Validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := chstore.Open(ch)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	var periods map[string]time.Duration
	if set != "" {
		periods, err = janitor.Set(ctx, store, set, time.Now())
	} else {
		periods, err = store.RecordedPeriods(ctx)
	}
	if err != nil {
		return err
	}
	written := map[string]string{}
	for k, d := range periods {
		written[k] = retention.FormatPeriod(d)
	}
	return json.NewEncoder(out).Encode(written)
}
