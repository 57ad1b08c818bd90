package mapping

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Config tunes the mapper's consumer.
type Config struct {
	MaxAckPending int
	PullBatch     int
	AckWait       time.Duration
	// StaleWait is how long an event waits for this process's registry copy
	// to reach the revision the event was accepted under.
	StaleWait time.Duration
}

// staleRetries is how many times an event is put back while the registry
// copy lags, StaleWait/staleRetries apart, before it is resolved anyway.
const staleRetries = 20

// Worker consumes accepted events, maps them and publishes the result.
type Worker struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	cache *registry.Cache
	log   *zap.Logger
}

// NewWorker returns a worker; Run starts it.
func NewWorker(cfg Config, nc *nats.Conn, js jetstream.JetStream, cache *registry.Cache, log *zap.Logger) *Worker {
	return &Worker{cfg: cfg, nc: nc, js: js, cache: cache, log: log}
}

// pending is an input message whose mapped result is being published.
type pending struct {
	in      jetstream.Msg
	fut     jetstream.PubAckFuture
	reply   string       // where to answer once the publish is acked
	outcome outcome.Code // the answer, when the mapper answers itself
}

// Run consumes until ctx ends, then stops taking messages and finishes
// publishing and acking those it holds.
func (w *Worker) Run(ctx context.Context) error {
	// Publishes complete in order; a bounded queue of them lets the
	// consumer run ahead of the acks without holding unbounded work.
	queue := make(chan pending, w.cfg.MaxAckPending)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.settle(queue)
	}()
	err := bus.ConsumeUntil(ctx, w.js, bus.Durable{
		Stream: bus.EventsStream, Name: bus.MapperDurable, AckWait: w.cfg.AckWait,
		MaxAckPending: w.cfg.MaxAckPending, PullBatch: w.cfg.PullBatch,
	}, w.log, func(m jetstream.Msg) { w.handle(m, queue) })
	close(queue)
	wg.Wait()
	return err
}

func (w *Worker) handle(m jetstream.Msg, queue chan<- pending) {
	var ev event.Event
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		w.log.Error("dropping unreadable event", zap.Error(err))
		_ = m.Term()
		return
	}
	reply := m.Headers().Get(event.HeaderReply)
	dev, ok := w.cache.Lookup(ev.Serial)
	if !ok || dev.Rev < ev.Rev {
		// The event was accepted under a record this copy has not seen
		// yet: give the registry watch time to deliver it.
		if md, err := m.Metadata(); err == nil && md.NumDelivered < staleRetries {
			_ = m.NakWithDelay(w.cfg.StaleWait / staleRetries)
			return
		}
		if !ok {
			w.answer(reply, event.Reply{Code: outcome.DeviceNotFound})
			_ = m.Term()
			return
		}
	}
	mapped, err := Resolve(ev, dev)
	if errors.Is(err, errPayload) {
		w.log.Error("dropping event", zap.String("event_id", ev.ID), zap.Error(err))
		w.answer(reply, event.Reply{Code: outcome.ProcessingFailed, Detail: "unreadable event payload"})
		_ = m.Term()
		return
	}
	data, err := json.Marshal(mapped)
	if err != nil {
		w.answer(reply, event.Reply{Code: outcome.ProcessingFailed, Detail: "encode mapped event"})
		_ = m.Term()
		return
	}
	out := &nats.Msg{Subject: bus.MappedSubject, Data: data, Header: nats.Header{}}
	p := pending{in: m, outcome: mapped.Outcome}
	if mapped.Outcome == outcome.Stored {
		// The writer answers once the values are stored.
		if reply != "" {
			out.Header.Set(event.HeaderReply, reply)
		}
	} else {
		// A raw-message-only record: the mapper answers itself.
		p.reply = reply
	}
	fut, err := w.js.PublishMsgAsync(out, jetstream.WithMsgID(ev.ID))
	if err != nil {
		w.log.Warn("publish mapped event", zap.String("event_id", ev.ID), zap.Error(err))
		_ = m.NakWithDelay(250 * time.Millisecond)
		return
	}
	p.fut = fut
	queue <- p
}

// settle acks each input once its mapped event is in the next stream.
func (w *Worker) settle(queue <-chan pending) {
	for p := range queue {
		select {
		case <-p.fut.Ok():
			if p.reply != "" {
				w.answer(p.reply, event.Reply{Code: p.outcome})
			}
			_ = p.in.Ack()
		case err := <-p.fut.Err():
			w.log.Warn("mapped event not stored in stream, will retry", zap.Error(err))
			_ = p.in.NakWithDelay(250 * time.Millisecond)
		}
	}
}

func (w *Worker) answer(subject string, r event.Reply) {
	if err := event.Answer(w.nc, subject, r); err != nil {
		w.log.Warn("send outcome", zap.Error(err))
	}
}
