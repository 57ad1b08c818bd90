// Package devicesdk records a device's readings to a durable queue on its
// disk and sends them to the device event service, so that a reading
// recorded is stored exactly once: across lost answers, restarts, power
// loss and outages of any length the queue's bounds allow. See docs/sdk.md
// in the service's repository.
package devicesdk

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
)

// Config configures a Client. URL, Serial, Token and Dir are required;
// zero values take the defaults in the comments.
type Config struct {
	URL            string // the service's base URL, e.g. https://ingest.example.com
	Serial         string
	Token          string
	SecondaryToken string // tried when Token is refused (a rotation in progress)
	Dir            string // the queue's directory
	Queue          QueueOptions

	BatchReadings  int           // 1,000: the service's MAX_BATCH_MESSAGES
	BatchBytes     int           // 512 KiB of request body
	RequestTimeout time.Duration // 30 s
	BaseBackoff    time.Duration // 1 s
	MaxBackoff     time.Duration // 5 min
	AuthWait       time.Duration // 5 min after 401, 403 or 404

	UnsetClock ClockPolicy   // FixLater
	ClockEpoch time.Time     // 2020-01-01 UTC: a clock before it is not set
	ClockWait  time.Duration // 1 h

	HTTPClient *http.Client // its redirects are not followed

	// OnAuthFailure is called with the status of each 401 or 403.
	OnAuthFailure func(status int)
	// Logf receives what the SDK has to say (never a token); nil: nothing.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.BatchReadings <= 0 {
		c.BatchReadings = 1000
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = 512 << 10
	}
	set(&c.RequestTimeout, 30*time.Second)
	set(&c.BaseBackoff, time.Second)
	set(&c.MaxBackoff, 5*time.Minute)
	set(&c.AuthWait, 5*time.Minute)
	set(&c.ClockWait, time.Hour)
	if c.ClockEpoch.IsZero() {
		c.ClockEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Reading is one reading: Data (or its JSON object text in JSON) at Time
// (zero: now).
type Reading struct {
	Data map[string]any
	JSON []byte
	Time time.Time
}

// Client records readings and sends them (Run).
type Client struct {
	cfg   Config
	q     *Queue
	boot  bootClock
	http  *http.Client
	wake  chan struct{}
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) bool

	kick chan struct{} // SetTokens ends a wait

	mu        sync.Mutex
	status    Status
	primary   string // the tokens, as Config or SetTokens gave them
	secondary string
	tokensGen uint64 // counts SetTokens calls
}

// Status is what a Client did and where it stands.
type Status struct {
	Queued       uint64            // readings not settled
	BytesOnDisk  int64             // the queue's segments
	Sent         uint64            // readings sent in requests (a resend counts again)
	Stored       uint64            // readings the service answered stored
	Refused      map[string]uint64 // readings refused for good, by the service's message
	Dropped      uint64            // readings that left the queue unsent: full, too old, torn or damaged
	RefusedFull  uint64            // readings Record refused: the queue was full
	TornBytes    int64             // bytes cut from torn segment tails when the queue was opened
	NoTime       uint64            // readings sent without a time of their own
	LastStatus   int               // the last answer's HTTP status (0: a network error)
	LastError    string
	NextAttempt  time.Time
	ActiveSecond bool // the secondary token is in use
}

var errNoData = errors.New("devicesdk: a reading's data must be a JSON object")

// Open opens the queue in cfg.Dir; Run sends it.
func Open(cfg Config) (*Client, error) {
	if cfg.URL == "" || cfg.Serial == "" || cfg.Token == "" || cfg.Dir == "" {
		return nil, errors.New("devicesdk: URL, Serial, Token and Dir are required")
	}
	cfg = cfg.withDefaults()
	q, err := OpenQueue(cfg.Dir, cfg.Queue)
	if err != nil {
		return nil, err
	}
	hc := http.Client{}
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Client{cfg: cfg, q: q, boot: newBootClock(), http: &hc, wake: make(chan struct{}, 1), now: time.Now,
		kick: make(chan struct{}, 1), status: Status{Refused: map[string]uint64{}}, primary: cfg.Token, secondary: cfg.SecondaryToken}
	c.sleep = func(ctx context.Context, d time.Duration) bool { return sleepKick(ctx, d, c.kick) }
	return c, nil
}

// Record records one reading taken now; it returns once it is on disk.
func (c *Client) Record(data map[string]any) error { return c.RecordAll([]Reading{{Data: data}}) }

// RecordAll records readings with one sync of the disk.
func (c *Client) RecordAll(rs []Reading) error {
	now := c.now()
	out := make([]reading, len(rs))
	for i, r := range rs {
		data := r.JSON
		if data == nil {
			var err error
			if data, err = json.Marshal(r.Data); err != nil {
				return err
			}
		}
		if !isObject(data) || len(data)+payloadHead > MaxRecordBytes {
			return errNoData
		}
		out[i] = c.stamp(r.Time, now)
		out[i].data = data
	}
	if _, err := c.q.record(out); err != nil {
		return err
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// stamp is the time a reading is recorded with (docs/sdk.md, "Time").
func (c *Client) stamp(at, now time.Time) reading {
	switch {
	case !at.IsZero() && !at.Before(c.cfg.ClockEpoch):
		return reading{kind: timeWall, time: at.UnixMilli()}
	case !now.Before(c.cfg.ClockEpoch) && at.IsZero():
		return reading{kind: timeWall, time: now.UnixMilli()}
	case c.cfg.UnsetClock == SendWithoutTime:
		return reading{kind: timeNone}
	}
	return reading{kind: timeBoot, time: c.boot.sinceBoot(), boot: c.boot.id}
}

func isObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return json.Valid(b)
		}
		return false
	}
	return false
}

// Status returns a copy of the client's status.
func (c *Client) Status() Status {
	c.mu.Lock()
	s := c.status
	s.Refused = make(map[string]uint64, len(c.status.Refused))
	for k, v := range c.status.Refused {
		s.Refused[k] = v
	}
	c.mu.Unlock()
	c.q.mu.Lock()
	s.Queued, s.BytesOnDisk = c.q.next-c.q.st.head, c.q.bytes
	d := c.q.drops
	s.Dropped, s.RefusedFull, s.TornBytes = d.full+d.age+d.torn+d.corrupt, d.refused, d.tornBytes
	c.q.mu.Unlock()
	return s
}

// SetTokens replaces the tokens (secondary may be empty), for instance from
// OnAuthFailure once the device fetched a new one; the next attempt goes at
// once, with the new primary.
func (c *Client) SetTokens(primary, secondary string) error {
	if primary == "" {
		return errors.New("devicesdk: a token is required")
	}
	c.mu.Lock()
	c.primary, c.secondary = primary, secondary
	c.tokensGen++
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

func (c *Client) token(secondary bool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if secondary && c.secondary != "" {
		return c.secondary
	}
	return c.primary
}

func (c *Client) secondaryToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.secondary
}

func (c *Client) tokenGen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokensGen
}

// Close closes the queue; call it after Run returned.
func (c *Client) Close() error { return c.q.Close() }
