package devicesdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Path is the service's backlog endpoint.
const Path = "/api/v1/deviceapi/events"

// answer is the service's JSON answer.
type answer struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Error   string `json:"error"`
	Results []struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
	} `json:"results"`
}

// sender is Run's state.
type sender struct {
	bo        *backoff
	secondary bool   // the secondary token is in use
	switched  bool   // tokens were switched since the last success
	tokens    uint64 // the Client's tokens generation this state is for
	limit     int    // readings a batch may hold after a 413 (0: BatchReadings)
}

// Run sends the queue until ctx ends; it returns ctx's error.
func (c *Client) Run(ctx context.Context) error {
	s := &sender{bo: newBackoff(c.cfg.BaseBackoff, c.cfg.MaxBackoff)}
	for {
		wait, err := c.step(ctx, s)
		if err != nil {
			c.note(0, err.Error())
			wait = max(wait, s.bo.failed())
		}
		if wait > 0 {
			c.mu.Lock()
			c.status.NextAttempt = c.now().Add(wait)
			c.mu.Unlock()
			if !c.sleep(ctx, wait) {
				return ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// step sends one batch, or waits for one; it returns how long to wait.
func (c *Client) step(ctx context.Context, s *sender) (time.Duration, error) {
	if gen := c.tokenGen(); gen != s.tokens { // SetTokens: the new primary, now
		s.tokens, s.secondary, s.switched = gen, false, false
	}
	maxN := c.cfg.BatchReadings
	if s.limit > 0 {
		maxN = min(maxN, s.limit)
	}
	now := c.now()
	b, err := c.q.peek(maxN, c.cfg.BatchBytes, now, func(r reading) bool { return c.waitsForClock(r, now) })
	if err != nil {
		return 0, err
	}
	if b.held {
		return 10 * time.Second, nil // the oldest reading waits for the clock
	}
	if len(b.readings) == 0 {
		select {
		case <-c.wake:
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		return 0, nil
	}
	body, noTime, hold := c.body(b)
	if hold {
		return 10 * time.Second, nil // a clock to be set
	}
	status, a, after, err := c.post(ctx, b, body, s)
	c.mu.Lock()
	c.status.Sent += uint64(len(b.readings))
	c.mu.Unlock()
	if err != nil {
		c.note(0, err.Error())
		return s.bo.failed(), nil
	}
	n := len(b.readings)
	if status == http.StatusOK && (a.Success || len(a.Results) == n) {
		c.note(status, a.Error)
		s.bo.succeeded()
		s.switched = false
		c.mu.Lock()
		c.status.NoTime += uint64(noTime)
		for i := range n {
			if a.Success || a.Results[i].Success {
				c.status.Stored++
			} else {
				c.status.Refused[a.Results[i].Message]++
			}
		}
		c.mu.Unlock()
		return 0, c.q.settle(b)
	}
	c.failed(status, a)
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if c.cfg.OnAuthFailure != nil {
			c.cfg.OnAuthFailure(status)
		}
		if gen := c.tokenGen(); gen != s.tokens {
			return 0, nil // the hook set new tokens: try them now
		}
		if c.secondaryToken() == "" {
			return c.cfg.AuthWait, nil
		}
		// Each turn tries the other token: at once the first time after a
		// success, then after AuthWait.
		s.secondary = !s.secondary
		if !s.switched {
			s.switched = true
			return 0, nil
		}
		return c.cfg.AuthWait, nil
	case http.StatusNotFound:
		return c.cfg.AuthWait, nil
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		if n > 1 {
			if status == http.StatusRequestEntityTooLarge {
				s.limit = max(n/2, 1)
			}
			return 0, c.q.split(b)
		}
		c.mu.Lock()
		c.status.Refused[a.Message]++
		c.mu.Unlock()
		return 0, c.q.settle(b)
	}
	// 429, 503, other 5xx and any other answer: the same batch again.
	if d, ok := after(); ok && d > 0 {
		return d, nil
	}
	return s.bo.failed(), nil
}

// post sends a batch's body; after reads the answer's Retry-After.
func (c *Client) post(ctx context.Context, b batch, body []byte, s *sender) (status int, a answer, after func() (time.Duration, bool), err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.cfg.URL, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return 0, a, nil, err
	}
	token := c.token(s.secondary)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%x-%d-%d", c.q.id, b.first, b.count))
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, a, nil, fmt.Errorf("post: %w", redact(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, a, nil, fmt.Errorf("read answer: %w", redact(err))
	}
	_ = json.Unmarshal(raw, &a) // an answer that is not the service's JSON is not a success
	c.mu.Lock()
	c.status.ActiveSecond = s.secondary
	c.mu.Unlock()
	now := c.now()
	return resp.StatusCode, a, func() (time.Duration, bool) { return retryAfter(resp.Header.Get("Retry-After"), now) }, nil
}

// redact keeps a URL error's text free of the request (it names no token,
// but a proxy's URL may carry credentials).
func redact(err error) error {
	if ue, ok := err.(interface{ Unwrap() error }); ok && strings.HasPrefix(err.Error(), "Post ") {
		return ue.Unwrap()
	}
	return err
}

// waitsForClock reports whether r, taken before the clock was set, waits
// for it (docs/sdk.md, "Time").
func (c *Client) waitsForClock(r reading, now time.Time) bool {
	return r.kind == timeBoot && now.Before(c.cfg.ClockEpoch) && r.boot == c.boot.id && c.cfg.UnsetClock == FixLater &&
		time.Duration(c.boot.sinceBoot()-r.time)*time.Millisecond < c.cfg.ClockWait
}

// body renders a batch as a request body; noTime is how many readings go
// without a time, hold whether the batch waits for the clock to be set.
func (c *Client) body(b batch) (body []byte, noTime int, hold bool) {
	now := c.now()
	clockSet := !now.Before(c.cfg.ClockEpoch)
	body = append(body, `{"serial":`...)
	serial, _ := json.Marshal(c.cfg.Serial)
	body = append(append(body, serial...), `,"messages":[`...)
	for i, r := range b.readings {
		if i > 0 {
			body = append(body, ',')
		}
		if c.waitsForClock(r, now) {
			return nil, 0, true
		}
		at, ok := int64(0), false
		switch {
		case r.kind == timeWall && r.time >= c.cfg.ClockEpoch.UnixMilli(): // a C queue may hold an unset clock's time
			at, ok = r.time, true
		case r.kind == timeBoot && clockSet && r.boot == c.boot.id:
			at, ok = now.UnixMilli()-(c.boot.sinceBoot()-r.time), true
		}
		if ok {
			body = append(body, `{"ts":"`...)
			body = time.UnixMilli(at).UTC().AppendFormat(body, "2006-01-02T15:04:05.000Z07:00")
			body = append(body, `","data":`...)
		} else {
			noTime++
			body = append(body, `{"data":`...)
		}
		body = append(append(body, r.data...), '}')
	}
	return append(body, "]}"...), noTime, false
}

// note keeps the last answer's status and error text.
func (c *Client) note(status int, text string) {
	c.mu.Lock()
	c.status.LastStatus, c.status.LastError = status, text
	c.mu.Unlock()
	if text != "" {
		c.cfg.Logf("devicesdk: status %d: %s", status, text)
	}
}

// failed notes an answer other than stored: its error text, else its
// message, else the status's name (a proxy's page has neither).
func (c *Client) failed(status int, a answer) {
	text := a.Error
	if text == "" {
		text = a.Message
	}
	if text == "" {
		text = http.StatusText(status)
	}
	c.note(status, text)
}

// sleepKick waits d, or until kick (SetTokens) or ctx ends; false: ctx ended.
func sleepKick(ctx context.Context, d time.Duration, kick <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-kick:
	case <-ctx.Done():
		return false
	}
	return true
}
