package query

// Diagnostics and fleet reads (pkg/diag counts, device_messages' times).
const (
	// Diagnostics asks for one device's (Serial) diagnostics over
	// [FromMs, ToMs).
	Diagnostics = "diagnostics"
	// Fleet asks for the fleet view over [FromMs, ToMs): devices that went
	// silent, the most rejected, and serials not provisioned that post.
	Fleet = "fleet"
)

// KindCount is how many requests and readings were answered with Kind.
type KindCount struct {
	Kind     string `json:"kind"`
	Requests uint64 `json:"requests"`
	Readings uint64 `json:"readings"`
}

// Rejection is one refused request of a device.
type Rejection struct {
	At      string `json:"at"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
	Source  string `json:"source,omitempty"`
}

// UnmatchedKey is a data key the device sends that matched no connected
// input: how often in the range, and its latest value (JSON text, cut
// at 256 bytes).
type UnmatchedKey struct {
	Key       string `json:"key"`
	Count     uint64 `json:"count"`
	LastAt    string `json:"lastAt"`
	LastValue string `json:"lastValue"`
}

// NoteCount is how many readings were stored at their receive time for
// one reason (the time note).
type NoteCount struct {
	Note  string `json:"note"`
	Count uint64 `json:"count"`
}

// ReadingTime is how late a device's readings arrive: receive time minus
// reading time, over the messages that carried a time of their own that
// was used (Timed of Messages); AtReceive counts those whose time was
// refused, by reason.
type ReadingTime struct {
	Messages  uint64      `json:"messages"`
	Timed     uint64      `json:"timed"`
	LateP50Ms int64       `json:"lateP50Ms"`
	LateP99Ms int64       `json:"lateP99Ms"`
	LateMaxMs int64       `json:"lateMaxMs"`
	AtReceive []NoteCount `json:"atReceive"`
}

// DeviceDiagnostics is one device's diagnostics over a range.
type DeviceDiagnostics struct {
	LastSeen    string         `json:"lastSeen,omitempty"`
	LastKind    string         `json:"lastKind,omitempty"`
	Counts      []KindCount    `json:"counts"`
	Rejections  []Rejection    `json:"rejections"`
	Keys        []UnmatchedKey `json:"unmatchedKeys"`
	ReadingTime ReadingTime    `json:"readingTime"`
}

// FleetSerial is one serial of the fleet view.
type FleetSerial struct {
	Serial    string `json:"serial"`
	FirstSeen string `json:"firstSeen,omitempty"`
	LastSeen  string `json:"lastSeen,omitempty"`
	Requests  uint64 `json:"requests"`
	// IntervalS is the device's usual interval between stored requests
	// (seconds), from the hourly counts of the last 30 days.
	IntervalS float64 `json:"intervalS,omitempty"`
}

// FleetView is the fleet view over a range.
type FleetView struct {
	Silent       []FleetSerial `json:"silent"`
	MostRejected []FleetSerial `json:"mostRejected"`
	Unknown      []FleetSerial `json:"unknown"`
	// UnknownUntracked counts requests of unprovisioned serials beyond
	// those tracked by name (a flood of random serials lands here).
	UnknownUntracked uint64 `json:"unknownUntracked"`
	// Unnamed counts the requests that named no serial (not JSON, no
	// serial, a refused address, ...) by kind of answer.
	Unnamed []KindCount `json:"unnamed"`
}
