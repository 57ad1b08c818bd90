// Package backfill holds the jobs that apply a device's mapping to its kept
// raw messages: ingest-api creates and cancels them (the workspace API),
// writer-worker runs them, one at a time in the whole deployment, and both
// keep them in a JetStream KV bucket, where the console reads their progress.
package backfill

import (
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/registry"
)

// The states of a job. Queued and Running are unfinished; the others are
// final.
const (
	Queued    = "queued"
	Running   = "running"
	Done      = "done"
	Cancelled = "cancelled"
	Failed    = "failed"
)

// Job is one backfill: the device's raw messages received in [FromNs, ToNs)
// mapped with Inputs, the connected inputs at its creation (a snapshot, so
// that writer-worker needs no registry and a later change of the mapping
// does not change a running job).
type Job struct {
	ID             string           `json:"id"`
	Serial         string           `json:"serial"`
	FromNs         int64            `json:"fromNs"`
	ToNs           int64            `json:"toNs"`
	Inputs         []registry.Input `json:"inputs"`
	TimestampInput string           `json:"timestampInput,omitempty"`
	State          string           `json:"state"`
	// CancelRequested stops a running job after its current page.
	CancelRequested bool   `json:"cancelRequested,omitempty"`
	CreatedBy       string `json:"createdBy"`
	CreatedNs       int64  `json:"createdNs"`
	StartedNs       int64  `json:"startedNs,omitempty"`
	FinishedNs      int64  `json:"finishedNs,omitempty"`
	// Where the job has got to: the receive time and event id of the last
	// raw message handled (messages are read in that order).
	CursorNs int64  `json:"cursorNs,omitempty"`
	CursorID string `json:"cursorId,omitempty"`
	Counts
	// Error is why the job failed, or the last error of a page that is
	// being retried.
	Error string `json:"error,omitempty"`
}

// Counts are what a job did.
type Counts struct {
	Messages   int64 `json:"messages"`   // raw messages read
	Readings   int64 `json:"readings"`   // values stored by the job
	Skipped    int64 `json:"skipped"`    // values already stored, not written again
	Unreadable int64 `json:"unreadable"` // raw messages whose data is not an object
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Messages += o.Messages
	c.Readings += o.Readings
	c.Skipped += o.Skipped
	c.Unreadable += o.Unreadable
}

// Finished reports whether the job is in a final state.
func (j Job) Finished() bool { return j.State != Queued && j.State != Running }

// Device is the device record the job maps with: its connected inputs and
// timestamp input, no tokens.
func (j Job) Device() registry.Device {
	return registry.Device{Serial: j.Serial, ConnectionType: registry.ConnectionAPI, Inputs: j.Inputs, TimestampInput: j.TimestampInput}
}

// View is a job as the workspace API shows it.
type View struct {
	ID              string           `json:"id"`
	Serial          string           `json:"serial"`
	From            string           `json:"from"`
	To              string           `json:"to"`
	State           string           `json:"state"`
	CancelRequested bool             `json:"cancelRequested"`
	CreatedBy       string           `json:"createdBy"`
	Created         string           `json:"created"`
	Started         string           `json:"started,omitempty"`
	Finished        string           `json:"finished,omitempty"`
	Progress        float64          `json:"progress"` // share of the range covered, 0 to 1
	Inputs          []registry.Input `json:"inputs"`
	Counts
	Error string `json:"error,omitempty"`
}

// View returns j as the workspace API shows it.
func (j Job) View() View {
	v := View{ID: j.ID, Serial: j.Serial, From: query.FormatNs(j.FromNs), To: query.FormatNs(j.ToNs), State: j.State,
		CancelRequested: j.CancelRequested, CreatedBy: j.CreatedBy, Created: query.FormatNs(j.CreatedNs),
		Inputs: j.Inputs, Counts: j.Counts, Error: j.Error}
	if v.Inputs == nil {
		v.Inputs = []registry.Input{}
	}
	if j.StartedNs != 0 {
		v.Started = query.FormatNs(j.StartedNs)
	}
	if j.FinishedNs != 0 {
		v.Finished = query.FormatNs(j.FinishedNs)
	}
	switch {
	case j.State == Done:
		v.Progress = 1
	case j.CursorNs > j.FromNs && j.ToNs > j.FromNs:
		v.Progress = min(1, float64(j.CursorNs-j.FromNs)/float64(j.ToNs-j.FromNs))
	}
	return v
}
