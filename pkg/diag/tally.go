package diag

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Limits bound what a Tally holds between reports, whatever strangers send.
type Limits struct {
	// Serials is the most provisioned serials counted in one interval;
	// answers to more are dropped (and counted as dropped).
	Serials int
	// Unknown is the most serials that are not provisioned tracked in one
	// minute, each by name; answers to others count under serial "".
	// Half the places go first to serials tracked the minute before, so
	// that one which keeps knocking stays visible among random ones.
	Unknown int
	// Rejections is the most rejections kept per serial and interval (the
	// latest), Keys the most unmatched keys per serial and interval, and
	// WindowKeys the most over all serials in one window (one report
	// interval of one minute; 0: no bound).
	Rejections, Keys, WindowKeys int
}

// DefaultLimits hold at most 100,000 serials' counts between reports: ~20
// MB of counts, ~80 MB when every one of them also keeps 3 rejections (a
// wrong-token flood over the whole fleet, ~30,000 a second; measured in
// docs/performance.md, "Diagnostics under a flood"); and at most 10,000
// unmatched keys a report interval, ~5 MB with their clipped names and
// values.
var DefaultLimits = Limits{Serials: 100_000, Unknown: 256, Rejections: 3, Keys: 32, WindowKeys: 10_000}

// Interval is how often a Tally reports (and the most that is lost of
// its counts when a process dies).
const Interval = 10 * time.Second

// Answer is one answer to count: Requests and Readings under Kind for
// Serial (Known: provisioned). A rejection (Requests > 0 and Kind
// Rejected) is kept with its Message, Error and Source. Only a request
// that proved it holds the device's token (Authenticated) counts as the
// device seen: anyone can name a serial.
type Answer struct {
	Serial             string
	Known              bool
	Authenticated      bool
	Kind               string
	Requests, Readings int
	At                 time.Time
	Message, Error     string
	Source             string
}

// Tally counts answers and unmatched keys per serial and minute, and sends
// what it has as Reports every Interval.
type Tally struct {
	lim     Limits
	send    func(context.Context, Report) error
	log     *zap.Logger
	dropped atomic.Uint64

	mu      sync.Mutex
	cur     *window
	pending []*window // whole minutes not sent yet (at most two)
	tracked map[string]bool
	prev    map[string]bool // unknown serials tracked the minute before
}

// window is what was counted in one minute since the last report.
type window struct {
	minute  int64
	serials map[string]*entry
	keys    int // unmatched keys over all serials
}

type entry struct {
	counts     map[string]*[2]uint64 // kind: requests, readings
	last       Seen
	rejections []Rejection // ring of the latest
	next       int
	keys       map[string]*Key
}

// NewTally returns a Tally that reports through send.
func NewTally(lim Limits, send func(context.Context, Report) error, log *zap.Logger) *Tally {
	return &Tally{lim: lim, send: send, log: log, tracked: map[string]bool{}}
}

// Dropped is how many answers and keys the limits kept out.
func (t *Tally) Dropped() uint64 { return t.dropped.Load() }

// Answer counts a.
func (t *Tally) Answer(a Answer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, serial, _ := t.entry(a.Serial, a.Known, a.At)
	if e == nil {
		t.dropped.Add(1)
		return
	}
	c := e.counts[a.Kind]
	if c == nil {
		c = new([2]uint64)
		e.counts[a.Kind] = c
	}
	c[0] += uint64(a.Requests)
	c[1] += uint64(a.Readings)
	if a.Requests == 0 {
		return
	}
	if ns := a.At.UnixNano(); a.Authenticated && ns >= e.last.LastNs {
		e.last = Seen{Serial: serial, LastNs: ns, Kind: a.Kind}
	}
	if Rejected(a.Kind) && t.lim.Rejections > 0 {
		r := Rejection{Serial: serial, AtNs: a.At.UnixNano(), Kind: a.Kind, Message: Clip(a.Message, maxText),
			Error: Clip(a.Error, maxText), Source: a.Source}
		if len(e.rejections) < t.lim.Rejections {
			e.rejections = append(e.rejections, r)
		} else {
			e.rejections[e.next] = r
			e.next = (e.next + 1) % len(e.rejections)
		}
	}
}

// Key counts a data key of a provisioned device's reading that matched no
// connected input, with its value (JSON text).
func (t *Tally) Key(serial, key string, value []byte, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, serial, w := t.entry(serial, true, at)
	if e == nil {
		t.dropped.Add(1)
		return
	}
	key = Clip(key, maxKey)
	k := e.keys[key]
	if k == nil {
		if len(e.keys) >= t.lim.Keys || (t.lim.WindowKeys > 0 && w.keys >= t.lim.WindowKeys) {
			t.dropped.Add(1)
			return
		}
		if e.keys == nil {
			e.keys = map[string]*Key{}
		}
		k = &Key{Serial: serial, Key: key}
		e.keys[key] = k
		w.keys++
	}
	k.Count++
	if ns := at.UnixNano(); ns >= k.LastNs {
		k.LastNs, k.LastValue = ns, Clip(string(value), maxValue)
	}
}

// entry is serial's entry of the window at, the serial as counted
// (clipped) and the window, or nil when the limits keep it out. An
// untracked unknown serial shares the entry of serial "".
func (t *Tally) entry(serial string, known bool, at time.Time) (*entry, string, *window) {
	minute := at.Unix() / 60 * 60
	if t.cur == nil || minute > t.cur.minute {
		t.rotate(minute)
	}
	w := t.cur
	if minute < w.minute && len(t.pending) > 0 && t.pending[len(t.pending)-1].minute == minute {
		w = t.pending[len(t.pending)-1] // an answer that began in the minute before
	}
	if !known && !t.track(serial) {
		serial = ""
	}
	serial = Clip(serial, maxSerial)
	e := w.serials[serial]
	if e == nil {
		if len(w.serials) >= t.lim.Serials+t.lim.Unknown+1 {
			return nil, "", w
		}
		e = &entry{counts: map[string]*[2]uint64{}}
		w.serials[serial] = e
	}
	return e, serial, w
}

// track reports whether an unknown serial is counted by name this minute.
func (t *Tally) track(serial string) bool {
	if serial == "" || t.tracked[serial] {
		return serial != ""
	}
	if n := len(t.tracked); n >= t.lim.Unknown || (n >= t.lim.Unknown/2 && !t.prev[serial]) {
		return false
	}
	t.tracked[serial] = true
	return true
}

// rotate starts minute: the window counted so far waits to be sent.
func (t *Tally) rotate(minute int64) {
	if t.cur != nil && len(t.cur.serials) > 0 {
		if len(t.pending) == 2 {
			t.dropped.Add(uint64(len(t.pending[0].serials)))
			t.pending = t.pending[1:]
		}
		t.pending = append(t.pending, t.cur)
	}
	if t.cur != nil {
		t.prev, t.tracked = t.tracked, map[string]bool{}
	}
	t.cur = &window{minute: minute, serials: map[string]*entry{}}
}

// take hands over everything counted, as reports.
func (t *Tally) take() []Report {
	t.mu.Lock()
	ws := t.pending
	t.pending = nil
	if t.cur != nil && len(t.cur.serials) > 0 {
		ws = append(ws, t.cur)
		t.cur = &window{minute: t.cur.minute, serials: map[string]*entry{}}
	}
	t.mu.Unlock()
	var out []Report
	for _, w := range ws {
		out = append(out, w.reports()...)
	}
	return out
}

// maxReportBytes keeps a report well inside one NATS message.
const maxReportBytes = 256 << 10

// reports renders a window, split so that no report passes maxReportBytes.
func (w *window) reports() []Report {
	var out []Report
	cur := Report{Format: Format, Minute: w.minute}
	size := 0
	add := func(n int) {
		if size+n > maxReportBytes && size > 0 {
			out = append(out, cur)
			cur, size = Report{Format: Format, Minute: w.minute}, 0
		}
		size += n
	}
	for serial, e := range w.serials {
		for kind, c := range e.counts {
			add(len(serial) + len(kind) + 48)
			cur.Counts = append(cur.Counts, Count{Serial: serial, Kind: kind, Requests: c[0], Readings: c[1]})
		}
		if e.last.LastNs != 0 {
			add(len(serial) + 64)
			cur.Seen = append(cur.Seen, e.last)
		}
		for _, r := range e.rejections {
			add(len(r.Serial) + len(r.Message) + len(r.Error) + len(r.Source) + 80)
			cur.Rejections = append(cur.Rejections, r)
		}
		for _, k := range e.keys {
			add(len(k.Serial) + len(k.Key) + len(k.LastValue) + 64)
			cur.Keys = append(cur.Keys, *k)
		}
	}
	if size > 0 {
		out = append(out, cur)
	}
	return out
}
