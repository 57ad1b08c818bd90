// Package audit is the workspace's audit trail: every change (a device
// created, changed or deleted, a token added, promoted, retired or revealed,
// a key created or revoked, dead letters replayed) as one record of who (the
// key's name), what (before and after, never a token), when and from where.
// Records are kept in a JetStream stream of their own (file storage,
// replicated as the others, MaxAge RETENTION's audit period), which only
// ingest-api may use, and listed newest first with filters.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
)

// Record is one change.
type Record struct {
	Seq    uint64          `json:"seq"` // its place in the trail, set when read
	ID     string          `json:"id"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"` // the key's name
	Role   string          `json:"role"`
	Action string          `json:"action"`
	Target string          `json:"target"` // a serial, a key's name
	Source string          `json:"source"` // the client address
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Filter selects records: each field that is set must match (Action as a
// prefix: "token." is every token change). Before is a cursor: records
// older than that sequence.
type Filter struct {
	Actor, Action, Target string
	Since                 time.Time
	Before                uint64
	Limit                 int
}

// Bounds of a listing.
const (
	MaxLimit = 500
	// maxScan is the most records one listing reads to fill a page with
	// filters; a page that stops there says where to go on.
	maxScan = 5000
)

// Log is the trail.
type Log struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	subject string
}

// Open creates the trail's stream, or opens it as it is: a copy started
// with another audit period says so and leaves the trail whole (its NATS
// user may not change the stream's limits).
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names, replicas int, maxAge time.Duration, log *zap.Logger) (*Log, error) {
	var st jetstream.Stream
	err := bus.UntilReady(ctx, log, func(ctx context.Context) (err error) {
		st, err = bus.EnsureStream(ctx, js, jetstream.StreamConfig{
			Name:        names.AuditStream,
			Description: "workspace audit trail: who changed what, when, from where",
			Subjects:    []string{names.AuditSubject()},
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
			MaxAge:      maxAge,
			Duplicates:  2 * time.Minute,
			AllowDirect: true,
		}, log)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open audit stream: %w", err)
	}
	return &Log{js: js, stream: st, subject: names.AuditSubject()}, nil
}

// Record appends r (its ID and time filled in when empty) and waits until
// the stream has it. A retry with the same ID within two minutes is kept
// once.
func (l *Log) Record(ctx context.Context, r Record) error {
	if r.ID == "" {
		r.ID = uuid.NewString()
	}
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = l.js.Publish(ctx, l.subject, b, jetstream.WithMsgID(r.ID))
	if err != nil {
		return fmt.Errorf("record audit: %w", err)
	}
	return nil
}

// List returns up to f.Limit records that match f, newest first, and the
// cursor of the next page (0: no more).
func (l *Log) List(ctx context.Context, f Filter) ([]Record, uint64, error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("audit trail: %w", err)
	}
	first, seq := info.State.FirstSeq, info.State.LastSeq
	if f.Before > 0 && f.Before-1 < seq {
		seq = f.Before - 1
	}
	limit := min(max(f.Limit, 1), MaxLimit)
	var out []Record
	for scanned := 0; seq >= first && seq > 0; seq-- {
		if len(out) == limit || scanned == maxScan {
			return out, seq + 1, nil
		}
		scanned++
		m, err := l.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("audit trail: %w", err)
		}
		var r Record
		if json.Unmarshal(m.Data, &r) != nil {
			continue
		}
		if !f.Since.IsZero() && r.At.Before(f.Since) {
			break // older records only from here
		}
		r.Seq = seq
		if matches(r, f) {
			out = append(out, r)
		}
	}
	return out, 0, nil
}

func matches(r Record, f Filter) bool {
	return (f.Actor == "" || r.Actor == f.Actor) &&
		(f.Action == "" || strings.HasPrefix(r.Action, f.Action)) &&
		(f.Target == "" || r.Target == f.Target)
}
