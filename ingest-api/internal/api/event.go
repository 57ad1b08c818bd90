package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"

	"github.com/devicehub/eventservice/ingest-api/internal/claim"
	"github.com/devicehub/eventservice/ingest-api/internal/publish"
	"github.com/devicehub/eventservice/ingest-api/internal/readtime"
	"github.com/devicehub/eventservice/pkg/event"
	"github.com/devicehub/eventservice/pkg/jsonobj"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
)

// postEvent is POST /api/v1/deviceapi/event: validate, authenticate against
// the in-memory registry, publish to JetStream, and wait for the outcome a
// worker sends back.
func (s *Server) postEvent(c echo.Context) error {
	var req request
	return s.ingest(c, func(body []byte, headerToken string) (string, string, int, outcome.Code, string) {
		var code outcome.Code
		req, code = parse(body, headerToken)
		return req.Serial, req.BodyToken, 1, code, ""
	}, func(a authorized) error {
		req.Payload = s.redactor.Apply(req.Payload, a.secrets...)
		return s.publishEvent(c, req, a)
	})
}

// publishEvent publishes an accepted reading and answers with its outcome.
func (s *Server) publishEvent(c echo.Context, req request, a authorized) error {
	ev := event.Event{Serial: req.Serial, ReceivedNs: s.timestamp(), Rev: a.dev.Rev, Token: a.token,
		Reply: s.waiter.Subject(), Payload: req.Payload}
	ev.ReadingNs, ev.TimeNote = s.readingTime(ev.ReceivedNs, req.TS, req.Data, a.dev.Device.TimestampInput)
	if key := strings.TrimSpace(c.Request().Header.Get(HeaderIdempotencyKey)); key != "" {
		ev.ID, ev.Keyed = KeyedEventID(req.Serial, key), true
	} else {
		ev.ID = uuid.NewString()
	}
	// The event travels on inside an envelope beside its mapped values: it
	// must fit twice in one NATS message.
	if 2*(len(req.Payload)+len(ev.ID)+len(ev.Serial)+len(ev.Reply))+512 > int(s.nc.MaxPayload()) {
		return s.respond(c, outcome.PayloadTooLarge, "", "", "")
	}
	replies, cancel := s.waiter.Register(ev.ID)
	defer cancel()
	published := time.Now()
	deadline := published.Add(s.limits.OutcomeTimeout)
	// The event shares a message with the events of concurrent requests.
	// A keyed one first takes the claim on its id: a retry that finds it
	// taken is answered with the first attempt's outcome.
	var refused <-chan struct{}
	var failed <-chan error
	var batch *publish.Batch
	var err error
	if ev.Keyed {
		failed, err = s.publisher.AddKeyed(&ev)
	} else if batch, err = s.publisher.Add(&ev); err == nil {
		refused = batch.Failed()
	}
	if err != nil {
		return s.notAccepted(c, req.Serial, ev.ID, err)
	}

	// The stream's ack is not awaited on its own: the outcome follows it,
	// and not waking for it saves a goroutine switch per request. A
	// refusal does wake us, at once.
	timer := time.NewTimer(s.limits.OutcomeTimeout)
	defer timer.Stop()
	ctx := c.Request().Context()
	select {
	case r := <-replies:
		s.metrics.outcomeWait.Observe(time.Since(published).Seconds())
		return s.respond(c, r.Code, req.Serial, ev.ID, r.Detail)
	case err := <-failed:
		if errors.Is(err, claim.ErrTaken) {
			return s.awaitEarlier(c, req.Serial, ev.ID, replies, deadline)
		}
		return s.notAccepted(c, req.Serial, ev.ID, err)
	case <-refused:
		return s.notAccepted(c, req.Serial, ev.ID, batch.Err())
	case <-timer.C:
		return s.respond(c, outcome.ProcessingFailed, req.Serial, ev.ID, "timed out waiting for the storage outcome")
	case <-ctx.Done():
		// The client is gone; nobody reads an answer.
		return nil
	}
}

// notAccepted answers an event that did not enter the events stream.
func (s *Server) notAccepted(c echo.Context, serial, id string, err error) error {
	s.metrics.publishErrors.Inc()
	return s.respond(c, outcome.ProcessingFailed, serial, id, "event not accepted: "+err.Error())
}

// HeaderIdempotencyKey names the header that makes retries of one reading
// safe: the same key for the same serial yields one stored reading.
const HeaderIdempotencyKey = "Idempotency-Key"

// keyNamespace derives event ids from (serial, Idempotency-Key).
var keyNamespace = uuid.MustParse("6f1c3a8e-2b7d-5e4f-9a10-d3e5c7b9a2f4")

// KeyedEventID is the event id of a reading sent with an Idempotency-Key:
// the same for every retry of it, and different for another device.
func KeyedEventID(serial, key string) string {
	return uuid.NewSHA1(keyNamespace, []byte(serial+"\x00"+key)).String()
}

const earlierTimeout = "timed out waiting for the outcome of an earlier attempt with this Idempotency-Key"

// earlierPoll is how often a retry asks for an earlier attempt's outcome
// while that attempt is still on its way.
const earlierPoll = 100 * time.Millisecond

// awaitEarlier answers a retry of a keyed event the stream already holds or
// held with the earlier attempt's outcome.
func (s *Server) awaitEarlier(c echo.Context, serial, id string, replies <-chan event.Reply, deadline time.Time) error {
	got, code, detail, ok := s.earlierOutcomes(c, []string{id}, replies, deadline)
	switch {
	case !ok:
		return nil // the client is gone
	case code != outcome.Stored:
		return s.respond(c, code, serial, id, detail)
	}
	return s.respond(c, got[id].Code, serial, id, got[id].Detail)
}

// earlierOutcomes waits for the outcomes of ids, events an earlier attempt
// with the same key put in the stream: from replies when that attempt waits
// on this instance, else from a writer-worker's record, polled until the
// deadline. It returns them all, or (code other than Stored) the answer to
// give instead: a timeout, or ClickHouse unreadable. ok is false when the
// client went away.
func (s *Server) earlierOutcomes(c echo.Context, ids []string, replies <-chan event.Reply, deadline time.Time) (
	got map[string]event.Reply, code outcome.Code, detail string, ok bool) {
	ctx, cancel := context.WithDeadline(c.Request().Context(), deadline)
	defer cancel()
	got = make(map[string]event.Reply, len(ids))
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	for len(got) < len(want) {
		select {
		case r := <-replies:
			if want[r.ID] {
				got[r.ID] = r
			}
		case <-poll.C:
			var missing []string
			for id := range want {
				if _, ok := got[id]; !ok {
					missing = append(missing, id)
				}
			}
			resp, code, err := s.ask(ctx, query.Outcome, query.Request{EventIDs: missing})
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				return nil, outcome.ProcessingFailed, earlierTimeout, true
			case ctx.Err() != nil:
				return nil, 0, "", false
			case err != nil:
				if code == outcome.ProcessingFailed && !errors.Is(err, nats.ErrNoResponders) {
					code = outcome.StorageFailed // the writer could not read ClickHouse
				}
				return nil, code, err.Error(), true
			}
			for id, prior := range resp.Outcomes {
				if want[id] {
					got[id] = event.Reply{ID: id, Code: prior}
				}
			}
			poll.Reset(earlierPoll)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, outcome.ProcessingFailed, earlierTimeout, true
			}
			return nil, 0, "", false
		}
	}
	return got, outcome.Stored, "", true
}

// readingTime is a reading's time and the note on a time refused: the
// message's ts, else the device's timestamp input in data, else the receive
// time (see readtime).
func (s *Server) readingTime(receivedNs int64, ts, data []byte, tsInput string) (int64, string) {
	if ts == nil && tsInput == "" {
		return receivedNs, ""
	}
	sources := [2]readtime.Source{{Name: "ts", Value: ts}}
	if tsInput != "" {
		sources[1] = readtime.Source{Name: "data." + tsInput, Value: jsonobj.Value(data, tsInput)}
	}
	return s.limits.ReadingTime.Resolve(time.Unix(0, receivedNs), sources[:]...)
}
