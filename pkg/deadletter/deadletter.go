// Package deadletter is the operators' side of the dead letters: what the
// workers gave up on (pkg/settle writes them with Write), listed and
// replayed into the stream they came from.
package deadletter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
)

// Dead-letter headers: why, from where, and what to replay.
const (
	HeaderReason     = "Dead-Letter-Reason"
	HeaderError      = "Dead-Letter-Error"
	HeaderSubject    = "Dead-Letter-Subject" // where a replay publishes it
	HeaderDeliveries = "Dead-Letter-Deliveries"
	HeaderKeyed      = "Dead-Letter-Keyed"
	// HeaderReplay marks a replayed message (its value: the letter's
	// sequence): its events may have been stored before.
	HeaderReplay = "Replay"
	// originalPrefix renames the original message's own Nats-* headers,
	// which would otherwise steer the dead-letter stream.
	originalPrefix = "Original-"
)

const maxErrorHeader = 512

// Write stores data (m's events, or the part of them that failed) with m's
// headers, the reason and the cause as a dead letter, and waits for the
// stream's ack. One letter per message delivery: a worker that dies
// between storing the letter and settling the message stores the same
// letter again, and the stream drops that copy.
func Write(ctx context.Context, js jetstream.JetStream, names bus.Names, m jetstream.Msg, data []byte, reason string, cause error, keyed bool, delivered uint64) error {
	h := nats.Header{}
	for k, vs := range m.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			k = originalPrefix + k
		}
		h[k] = vs
	}
	h.Set(HeaderReason, reason)
	if cause != nil {
		text := cause.Error()
		if len(text) > maxErrorHeader {
			text = text[:maxErrorHeader]
		}
		h.Set(HeaderError, strings.ToValidUTF8(strings.ReplaceAll(text, "\n", " "), "?"))
	}
	h.Set(HeaderSubject, m.Subject())
	h.Set(HeaderDeliveries, strconv.FormatUint(delivered, 10))
	h.Set(HeaderKeyed, strconv.FormatBool(keyed))
	if md, err := m.Metadata(); err == nil {
		h.Set(nats.MsgIdHdr, fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream))
	}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: names.DeadLetterSubject(), Header: h, Data: data}); err != nil {
		return fmt.Errorf("store dead letter: %w", err)
	}
	return nil
}

// Letter is one dead letter as an operator sees it.
type Letter struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"` // where a replay sends it
	Reason     string    `json:"reason"`
	Error      string    `json:"error,omitempty"`
	Deliveries uint64    `json:"deliveries"`
	Keyed      bool      `json:"keyed"`
	Events     int       `json:"events"` // events it holds (0: unreadable)
	Bytes      int       `json:"bytes"`
}

// countEvents is how many events a letter's data holds: an envelope of
// mapped events, or an events message.
func countEvents(data []byte) int {
	if ms, err := event.DecodeEnvelope(data); err == nil {
		return len(ms)
	}
	if evs, err := event.DecodeEvents(data); err == nil {
		return len(evs)
	}
	return 0
}

func letterOf(m *jetstream.RawStreamMsg) Letter {
	keyed, _ := strconv.ParseBool(m.Header.Get(HeaderKeyed))
	deliveries, _ := strconv.ParseUint(m.Header.Get(HeaderDeliveries), 10, 64)
	return Letter{Seq: m.Sequence, Time: m.Time.UTC(), Subject: m.Header.Get(HeaderSubject),
		Reason: m.Header.Get(HeaderReason), Error: m.Header.Get(HeaderError),
		Deliveries: deliveries, Keyed: keyed, Events: countEvents(m.Data), Bytes: len(m.Data)}
}

// letters reads dead letters from sequence from on, at most limit of them,
// calling each for every one in order, with their stream.
func letters(ctx context.Context, js jetstream.JetStream, names bus.Names, from uint64, limit int, each func(jetstream.Stream, *jetstream.RawStreamMsg) error) error {
	st, err := js.Stream(ctx, names.DeadLetterStream)
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	seq := max(from, 1)
	for n := 0; n < limit; n++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(names.DeadLetterSubject()))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read dead letter %d: %w", seq, err)
		}
		if err := each(st, m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// List returns up to limit dead letters from sequence from on.
func List(ctx context.Context, js jetstream.JetStream, names bus.Names, from uint64, limit int) ([]Letter, error) {
	var out []Letter
	err := letters(ctx, js, names, from, limit, func(_ jetstream.Stream, m *jetstream.RawStreamMsg) error {
		out = append(out, letterOf(m))
		return nil
	})
	return out, err
}

// ReplayOptions choose which letters a replay sends back.
type ReplayOptions struct {
	From  uint64 // first sequence (0: the oldest)
	Limit int    // most letters looked at
	// Seqs, when not empty, are the only letters replayed.
	Seqs []uint64
	// Unkeyed replays letters of events sent without an Idempotency-Key
	// too. Their devices were answered "not stored" and may have sent the
	// reading again since: replaying such a letter can store it twice.
	Unkeyed bool
	// Keep leaves replayed letters in place (a second replay of them
	// stores nothing more); by default a letter is deleted once its
	// replay is in the worker's stream.
	Keep bool
}

// ReplayReport counts what a replay did.
type ReplayReport struct {
	Replayed       int `json:"replayed"`
	SkippedUnkeyed int `json:"skippedUnkeyed"`
}

// Replay sends letters back to the stream they came from, marked as
// replays: the worker checks whether each event was stored before and
// stores it at most once.
func Replay(ctx context.Context, js jetstream.JetStream, names bus.Names, opt ReplayOptions) (ReplayReport, error) {
	var rep ReplayReport
	err := letters(ctx, js, names, opt.From, opt.Limit, func(st jetstream.Stream, m *jetstream.RawStreamMsg) error {
		l := letterOf(m)
		if len(opt.Seqs) > 0 && !slices.Contains(opt.Seqs, l.Seq) {
			return nil
		}
		if !l.Keyed && !opt.Unkeyed {
			rep.SkippedUnkeyed++
			return nil
		}
		if !strings.HasPrefix(l.Subject, names.SubjectPrefix+".") {
			return fmt.Errorf("dead letter %d: subject %q is not one of this deployment's", l.Seq, l.Subject)
		}
		h := nats.Header{}
		for k, vs := range m.Header {
			switch {
			case strings.HasPrefix(k, "Dead-Letter-"), strings.HasPrefix(k, "Nats-"):
			case strings.HasPrefix(k, originalPrefix+"Nats-"):
				// A message id would let the stream drop the replay as a
				// duplicate of the original.
			default:
				h[k] = vs
			}
		}
		h.Set(HeaderReplay, strconv.FormatUint(l.Seq, 10))
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: l.Subject, Header: h, Data: m.Data}); err != nil {
			return fmt.Errorf("replay dead letter %d: %w", l.Seq, err)
		}
		rep.Replayed++
		if !opt.Keep {
			if err := st.DeleteMsg(ctx, l.Seq); err != nil {
				return fmt.Errorf("delete replayed dead letter %d: %w", l.Seq, err)
			}
		}
		return nil
	})
	return rep, err
}

// IsReplay reports whether m was replayed from the dead letters.
func IsReplay(m jetstream.Msg) bool { return m.Headers().Get(HeaderReplay) != "" }
