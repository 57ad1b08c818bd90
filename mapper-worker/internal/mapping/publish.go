package mapping

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/reply"
	"github.com/devicehub/eventservice/pkg/retry"
	"github.com/devicehub/eventservice/pkg/settle"
)

// publish sends one envelope. Its message id is derived from the events
// message's place in its stream and the events it holds: a redelivery of
// that message maps to the same id, which the stream drops as a duplicate,
// while a device's retry (another events message, even with the same
// keyed event ids) or a replay is a new envelope.
func (w *Worker) publish(env *envelope, mapped []event.Mapped, queue chan<- *envelope) {
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint64(nil, env.in.Sequence()))
	for i := range mapped {
		h.Write([]byte(mapped[i].ID))
	}
	id := hex.EncodeToString(h.Sum(nil)[:16])
	w.m.envelopeEvents.Observe(float64(len(mapped)))
	env.msg = &nats.Msg{Subject: w.cfg.Names.MappedSubject(), Header: nats.Header{nats.MsgIdHdr: {id}}, Data: event.AppendEnvelope(nil, mapped)}
	bus.CarryClaims(env.in.Header, env.msg.Header)
	fut, err := w.js.PublishMsgAsync(env.msg)
	if err != nil {
		w.handoffFailed(env, err)
		return
	}
	env.fut = fut
	queue <- env
}

// awaitAcks settles each envelope's inputs once the envelope is in the next
// stream, or as the policy says when it was refused.
func (w *Worker) awaitAcks(queue <-chan *envelope) {
	for env := range queue {
		select {
		case <-env.fut.Ok():
		case err := <-env.fut.Err():
			if !w.republish(env) {
				w.handoffFailed(env, err)
				continue
			}
		}
		w.m.envelopes.Inc()
		env.in.Settle(settle.Done, nil)
	}
}

// Re-publishing an envelope whose ack did not come: 3 tries of 2 s each,
// up to 250 ms then 500 ms apart.
const republishTimeout = 2 * time.Second

var republishing = retry.Backoff{Initial: 250 * time.Millisecond, Max: time.Second, Tries: 3}

// errInProcess is the stream's answer to a message id it holds as "in
// process": a proposal of a message with that id not yet applied.
var errInProcess = &jetstream.APIError{ErrorCode: 10158} // JSStreamDuplicateMessageConflict

// republish sends an envelope again, with the same message id, when the
// stream's ack did not come (a timeout, a leader change): the envelope may
// be stored already, and the stream's duplicate window then answers with
// its ack instead of storing it twice. Only when that fails too are its
// inputs redelivered and mapped again, possibly into other envelopes: the
// writer then checks those events against what is stored, but an envelope
// stored late could not be told apart. It reports whether the stream has
// the envelope.
//
// A stream that answers every try with "in process" holds a proposal of
// the envelope it may never apply (seen after two of three nodes lost
// power: it refused the id until its duplicate window passed, and no
// request was stored for over 35 s). The envelope then goes under another
// id, its events marked maybe stored: should the first copy land too,
// the writer finds its events stored (both copies are checked: this one
// marked, the late one older than the writer's redeliveryAge).
func (w *Worker) republish(env *envelope) bool {
	send := func(msg *nats.Msg) error {
		return republishing.Do(context.Background(), func(context.Context) error {
			ctx, cancel := context.WithTimeout(context.Background(), republishTimeout)
			defer cancel()
			_, err := w.js.PublishMsg(ctx, msg)
			return err
		}, func(try int, err error, _ time.Duration) {
			w.log.Debug("re-publish envelope", zap.Int("try", try), zap.Error(err))
		})
	}
	err := send(env.msg)
	if errors.Is(err, errInProcess) {
		if other, cerr := otherID(env.msg); cerr == nil {
			w.m.inProcess.Inc()
			w.log.Warn("the stream keeps the envelope's message id in process: sent under another id", zap.Error(err))
			err = send(other)
		}
	}
	if err != nil {
		return false
	}
	w.m.republished.Inc()
	return true
}

// otherID is msg under a message id of its own, derived from msg's (so a
// redelivery of the same input takes it again), its events marked maybe
// stored.
func otherID(msg *nats.Msg) (*nats.Msg, error) {
	mapped, err := event.DecodeEnvelope(msg.Data)
	if err != nil {
		return nil, err
	}
	for i := range mapped {
		mapped[i].MaybeStored = true
	}
	h := maps.Clone(msg.Header)
	h.Set(nats.MsgIdHdr, msg.Header.Get(nats.MsgIdHdr)+"-again")
	return &nats.Msg{Subject: msg.Subject, Header: h, Data: event.AppendEnvelope(nil, mapped)}, nil
}

// handoffFailed settles the inputs of an envelope the next stream did not
// take: retried, and past the delivery limit dead-lettered and answered.
func (w *Worker) handoffFailed(env *envelope, err error) {
	w.m.publishErrors.Inc()
	w.log.Warn("envelope not stored in stream", zap.Error(err))
	err = fmt.Errorf("publish envelope: %w", err)
	var answers reply.Replies
	if d := env.in.Settle(settle.HandoffFailed, err); d.Answer == settle.AnswerFailure {
		answerAll(&answers, env.in.Data(), outcome.ProcessingFailed, err.Error())
	}
	answers.Send(w.nc, w.log)
}

// answerAll answers every event of an events message with code.
func answerAll(rs *reply.Replies, data []byte, code outcome.Code, detail string) {
	evs, err := event.DecodeEvents(data)
	if err != nil {
		return
	}
	for _, ev := range evs {
		rs.Add(ev.Reply, event.Reply{ID: ev.ID, Code: code, Detail: detail})
	}
}
