package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/pkg/version"
	"github.com/devicehub/eventservice/writer-worker/internal/backup"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

const backupUsage = `usage: writer-worker backup  -dir DIR
       writer-worker restore -dir DIR

backup writes, while ingestion runs, the device registry, the workspace keys
and the audit trail (NATS) and the readings, raw messages, idempotency
records, diagnostics and recorded retention periods (ClickHouse) into DIR: everything answered stored
before it began is in it. restore loads such a directory into a fresh
deployment (empty tables and streams, the backup's NATS_PREFIX) before its
programs start; the rollups are computed again when writer-worker starts. Both take the worker's NATS
and ClickHouse settings; run them as the operator NATS user. Device tokens
are kept as digests and sealed copies: the restored deployment needs the
same TOKEN_KEY. It prints one JSON line: the backup's manifest.`

// backupCommand runs backup or restore with args.
func backupCommand(cmd string, args []string, out io.Writer) error {
	var nc bus.Config
	var ch chstore.Config
	var dir string
	fs := envflag.New("writer-worker " + cmd)
	nc.Register(fs)
	ch.Register(fs)
	fs.FS.StringVar(&dir, "dir", "", "the backup's directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if dir == "" {
		return errors.New(backupUsage)
	}
	if err := errors.Join(nc.Validate(), ch.Validate()); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 12*time.Hour)
	defer cancel()
	conn, js, err := bus.Connect(nc, "writer-worker "+cmd, zap.NewNop())
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := bus.WaitConnected(ctx, conn); err != nil {
		return err
	}
	store, err := chstore.Open(ch)
	if err != nil {
		return err
	}
	defer store.Close()
	var m backup.Manifest
	if cmd == "backup" {
		m, err = backup.Backup(ctx, js, nc.Names(), store, dir, version.Version)
	} else {
		m, err = backup.Restore(ctx, js, nc.Names(), store, dir)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(m)
}
