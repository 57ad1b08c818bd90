package workspace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/backfill"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// maxListedBackfills is how many of a device's backfills are listed.
const maxListedBackfills = 20

// startBackfill: POST /devices/{serial}/backfills {from, to?}: the device's
// current mapping applied to its raw messages received in [from, to) (to:
// now). A device runs one backfill at a time; writer-worker runs them.
func (s *Server) startBackfill(c echo.Context) error {
	serial := c.Param("serial")
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return s.respond(c, outcome.BadRequest, edge.Clip(serial), "", "body must be {\"from\": RFC 3339, \"to\"?: RFC 3339}")
	}
	now := time.Now()
	from, to, err := backfillRange(req.From, req.To, now)
	if err != nil {
		return s.respond(c, outcome.BadRequest, edge.Clip(serial), "", err.Error())
	}
	dev, ok := s.cache.Lookup(serial)
	if !ok {
		return s.respond(c, outcome.DeviceNotFound, edge.Clip(serial), "", "")
	}
	if !dev.Connected() {
		return s.respond(c, outcome.BadRequest, edge.Clip(serial), "", "the device has no connected input: connect one, then backfill")
	}
	ctx := c.Request().Context()
	jobs, err := s.Backfills.List(ctx, serial)
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, edge.Clip(serial), "", err.Error())
	}
	for _, j := range jobs {
		if !j.Finished() {
			return s.respond(c, outcome.Conflict, edge.Clip(serial), "", fmt.Sprintf("backfill %s of this device is %s: cancel it or wait for it", j.ID, j.State))
		}
	}
	j := backfill.Job{ID: nuid.Next(), Serial: serial, FromNs: from.UnixNano(), ToNs: to.UnixNano(), State: backfill.Queued,
		CreatedBy: caller(c).Name, CreatedNs: now.UnixNano(), TimestampInput: dev.Device.TimestampInput}
	for _, in := range dev.Device.Inputs {
		if in.Entity != "" {
			j.Inputs = append(j.Inputs, in)
		}
	}
	// The device's slot, taken by compare-and-set: of two starts at once
	// (on any copies), both past the check above, one is refused. Taken,
	// it is kept or given back whether or not the client waits.
	ctx = context.WithoutCancel(ctx)
	busy, err := s.Backfills.Claim(ctx, serial, j.ID)
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, edge.Clip(serial), "", err.Error())
	}
	if busy != "" {
		return s.respond(c, outcome.Conflict, edge.Clip(serial), "", fmt.Sprintf("backfill %s of this device is queued or running: cancel it or wait for it", busy))
	}
	if err := s.Backfills.Create(ctx, j); err != nil {
		if uerr := s.Backfills.Unclaim(ctx, serial, j.ID); uerr != nil {
			s.Log.Warn("backfill slot not given back", zap.String("serial", edge.Clip(serial)), zap.Error(uerr))
		}
		return s.respond(c, outcome.ProcessingFailed, edge.Clip(serial), "", err.Error())
	}
	v := j.View()
	s.record(c, "backfill.started", serial, nil, v)
	return c.JSON(http.StatusAccepted, v)
}

// backfillRange reads a backfill's range; to defaults to now, and a range
// reaching past now ends now.
func backfillRange(fromText, toText string, now time.Time) (from, to time.Time, err error) {
	const want = "from and to must be RFC 3339 times, from before to and before now"
	from, err = time.Parse(time.RFC3339Nano, fromText)
	if err != nil {
		return from, to, errors.New(want)
	}
	to = now
	if toText != "" {
		if to, err = time.Parse(time.RFC3339Nano, toText); err != nil {
			return from, to, errors.New(want)
		}
		if to.After(now) {
			to = now
		}
	}
	if !from.Before(to) {
		return from, to, errors.New(want)
	}
	if from.Before(time.Unix(0, 0)) { // the epoch's nanoseconds hold no earlier time
		return from, to, errors.New("from must not be before 1970-01-01T00:00:00Z")
	}
	return from, to, nil
}

// listBackfills: GET /devices/{serial}/backfills: the device's latest
// backfills, newest first.
func (s *Server) listBackfills(c echo.Context) error {
	jobs, err := s.Backfills.List(c.Request().Context(), c.Param("serial"))
	if err != nil {
		return s.respond(c, outcome.ProcessingFailed, edge.Clip(c.Param("serial")), "", err.Error())
	}
	views := make([]backfill.View, 0, min(len(jobs), maxListedBackfills))
	for _, j := range jobs[:min(len(jobs), maxListedBackfills)] {
		views = append(views, j.View())
	}
	return c.JSON(http.StatusOK, struct {
		Backfills []backfill.View `json:"backfills"`
	}{views})
}

// cancelBackfill: DELETE /devices/{serial}/backfills/{id}: a queued
// backfill is cancelled at once, a running one after its current page; a
// finished one stays as it is.
func (s *Server) cancelBackfill(c echo.Context) error {
	serial, id := c.Param("serial"), c.Param("id")
	if !backfill.ValidID(id) {
		return s.respond(c, outcome.NotFound, edge.Clip(serial), "", "the device has no backfill "+edge.Clip(id))
	}
	before, j, err := s.cancel(c.Request().Context(), serial, id)
	switch {
	case errors.Is(err, backfill.ErrNotFound):
		return s.respond(c, outcome.NotFound, edge.Clip(serial), "", "the device has no backfill "+edge.Clip(id))
	case err != nil:
		return s.respond(c, outcome.ProcessingFailed, edge.Clip(serial), "", err.Error())
	}
	v := j.View()
	if v.State != before.State || v.CancelRequested != before.CancelRequested { // a finished one: nothing to record
		s.record(c, "backfill.cancelled", serial, before, v)
	}
	return c.JSON(http.StatusOK, v)
}

// cancel cancels a backfill: a queued one at once, a running one by
// request (writer-worker stops it after its current page).
func (s *Server) cancel(ctx context.Context, serial, id string) (before backfill.View, _ backfill.Job, _ error) {
	j, err := s.Backfills.Update(ctx, serial, id, func(j *backfill.Job) error {
		before = j.View()
		switch j.State {
		case backfill.Queued:
			j.State, j.FinishedNs = backfill.Cancelled, time.Now().UnixNano()
		case backfill.Running:
			j.CancelRequested = true
		}
		return nil
	})
	return before, j, err
}

// cancelBackfillsOf cancels a deleted device's unfinished backfills.
func (s *Server) cancelBackfillsOf(c echo.Context, serial string) {
	jobs, err := s.Backfills.List(c.Request().Context(), serial)
	if err != nil {
		s.Log.Warn("backfills of a deleted device not cancelled", zap.String("serial", edge.Clip(serial)), zap.Error(err))
		return
	}
	for _, j := range jobs {
		if j.Finished() {
			continue
		}
		if before, after, err := s.cancel(c.Request().Context(), serial, j.ID); err == nil {
			s.record(c, "backfill.cancelled", serial, before, after.View())
		}
	}
}
