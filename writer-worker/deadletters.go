package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/deadletter"
	"github.com/devicehub/eventservice/pkg/envflag"
	"github.com/devicehub/eventservice/writer-worker/schema"
)

const deadLettersUsage = `usage: writer-worker dead-letters list   [-from SEQ] [-limit N]
       writer-worker dead-letters replay [-from SEQ] [-limit N] [-seq SEQ,...] [-unkeyed] [-keep]

list prints one JSON line per dead letter: seq, time, subject, reason, error,
deliveries, keyed, bytes. replay sends letters back to the stream they came
from once their cause is fixed; each event is stored at most once. Letters of
events sent without an Idempotency-Key are skipped unless -unkeyed is given:
their devices were answered "not stored" and may have sent the reading again.
The NATS settings (NATS_URL, ...) are those of the worker.`

// deadLetters is the operator's subcommand; it returns the exit status.
func deadLetters(args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return errors.New(deadLettersUsage)
	}
	cmd := args[0]
	var cfg bus.Config
	var seqs string
	var opt deadletter.ReplayOptions // list uses its From and Limit too
	fs := envflag.New("writer-worker dead-letters " + cmd)
	cfg.Register(fs)
	fs.FS.Uint64Var(&opt.From, "from", 0, "first sequence to look at (0: the oldest)")
	fs.FS.IntVar(&opt.Limit, "limit", 1000, "most letters looked at")
	if cmd == "replay" {
		fs.FS.StringVar(&seqs, "seq", "", "replay only these sequences (comma separated)")
		fs.FS.BoolVar(&opt.Unkeyed, "unkeyed", false, "also replay events sent without an Idempotency-Key (may store a reading twice)")
		fs.FS.BoolVar(&opt.Keep, "keep", false, "leave replayed letters in the stream")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, s := range strings.Split(seqs, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("-seq %q: %w", s, err)
		}
		opt.Seqs = append(opt.Seqs, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	nc, js, err := bus.Connect(cfg, "writer-worker dead-letters", zap.NewNop())
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := bus.WaitConnected(ctx, nc); err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if cmd == "list" {
		letters, err := deadletter.List(ctx, js, cfg.Names(), opt.From, opt.Limit)
		for _, l := range letters {
			_ = enc.Encode(l)
		}
		return err
	}
	rep, err := deadletter.Replay(ctx, js, cfg.Names(), opt)
	_ = enc.Encode(rep)
	return err
}

// subcommand runs writer-worker's subcommands; it reports whether args
// named one.
func subcommand(args []string) bool {
	if len(args) > 0 && args[0] == "schema" {
		// schema [-replicated]: print the schema operators apply by hand.
		if len(args) > 1 && args[1] == "-replicated" {
			fmt.Print(schema.ReplicatedFile())
		} else {
			fmt.Println(strings.Join(schema.Statements("device_events"), ";\n\n") + ";")
		}
		return true
	}
	if len(args) > 0 && (args[0] == "backup" || args[0] == "restore") {
		if err := backupCommand(args[0], args[1:], os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "writer-worker %s: %v\n", args[0], err)
			os.Exit(1)
		}
		return true
	}
	if len(args) > 0 && args[0] == "retention" {
		if err := retentionCommand(args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "writer-worker retention:", err)
			os.Exit(1)
		}
		return true
	}
	if len(args) == 0 || args[0] != "dead-letters" {
		return false
	}
	if err := deadLetters(args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "writer-worker dead-letters:", err)
		os.Exit(1)
	}
	return true
}
