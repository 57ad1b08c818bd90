package devicesdk

import (
	"context"
	"testing"
	"time"
)

// Only 400 and 413 split a batch or refuse a reading: another 4xx (a
// proxy's 405, 407, 421...) is retried with the back-off, the same batch
// under the same key.
func TestSendRetriesOther4xx(t *testing.T) {
	n := 0
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) {
		if n++; n == 1 {
			return 405, nil, "<html>method not allowed</html>"
		}
		return 200, nil, storedAnswer
	}}
	var logged []string
	c, waits, run := client(t, f, Config{Logf: func(f string, a ...any) { logged = append(logged, f) }}, 100)
	recordValues(t, c, 4)
	run()
	r := f.requests()
	if len(r) != 2 || len(r[1].Messages) != 4 || r[0].Key != r[1].Key || len(*waits) != 1 || c.Status().Stored != 4 || len(c.Status().Refused) != 0 {
		t.Fatalf("%d requests, waits %v, status %+v", len(r), *waits, c.Status())
	}
	if len(logged) != 1 {
		t.Fatalf("logged %q, want the failed attempt once", logged)
	}
}

// A Retry-After of 0 (or a date in the past) is no reason to resend at
// once: the back-off applies (review: a tight loop).
func TestSendRetryAfterZeroBacksOff(t *testing.T) {
	n := 0
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) {
		if n++; n <= 3 {
			return 503, map[string]string{"Retry-After": []string{"0", "Thu, 01 Jan 2015 00:00:00 GMT", "0"}[n-1]}, `{"success":false}`
		}
		return 200, nil, storedAnswer
	}}
	c, waits, run := client(t, f, Config{}, 100)
	recordValues(t, c, 1)
	run()
	if len(*waits) != 3 || len(f.requests()) != 4 {
		t.Fatalf("waits %v, %d requests", *waits, len(f.requests()))
	}
	for _, w := range *waits {
		if w <= 0 {
			t.Fatalf("waits %v: a zero wait is a resend at once", *waits)
		}
	}
}

// Tokens alternate, one per AuthWait, so that a device whose secondary is
// not valid yet goes back to its primary; SetTokens is tried at once.
func TestSendAlternatesTokens(t *testing.T) {
	valid := "tok-primary"
	f := &fake{}
	f.answer = func(r fakeReq) (int, map[string]string, string) {
		f.mu.Lock()
		ok := r.Token == valid
		f.mu.Unlock()
		if !ok {
			return 401, nil, `{"success":false,"message":"Invalid access token"}`
		}
		return 200, nil, storedAnswer
	}
	c, waits, run := client(t, f, Config{SecondaryToken: "tok-next"}, 100)
	var tokens []string
	c.sleep = func(ctx context.Context, d time.Duration) bool {
		*waits = append(*waits, d)
		if len(*waits) == 1 {
			f.mu.Lock()
			valid = "tok-primary" // the primary works again after a wait
			f.mu.Unlock()
		}
		return ctx.Err() == nil
	}
	f.mu.Lock()
	valid = "tok-none"
	f.mu.Unlock()
	recordValues(t, c, 1)
	run()
	for _, r := range f.requests() {
		tokens = append(tokens, r.Token)
	}
	if len(tokens) != 3 || tokens[0] != "tok-primary" || tokens[1] != "tok-next" || tokens[2] != "tok-primary" || len(*waits) != 1 || (*waits)[0] != 5*time.Minute {
		t.Fatalf("tokens %v, waits %v", tokens, *waits)
	}

	// The hook installs a new token: the next attempt uses it at once.
	f2 := &fake{answer: func(r fakeReq) (int, map[string]string, string) {
		if r.Token != "tok-fetched" {
			return 403, nil, `{"success":false}`
		}
		return 200, nil, storedAnswer
	}}
	var c2 *Client
	c2, waits2, run2 := client(t, f2, Config{OnAuthFailure: func(int) { _ = c2.SetTokens("tok-fetched", "") }}, 100)
	recordValues(t, c2, 1)
	run2()
	if r := f2.requests(); len(r) != 2 || r[1].Token != "tok-fetched" || len(*waits2) != 0 {
		t.Fatalf("%d requests, waits %v", len(r), *waits2)
	}
}

// A reading waiting for the clock ends the batch before it: the readings
// before it are sent (review: one young reading held every batch).
func TestSendDoesNotHoldOlderReadings(t *testing.T) {
	unset := time.Date(1970, 1, 1, 0, 5, 0, 0, time.UTC)
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 200, nil, storedAnswer }}
	c, waits, run := client(t, f, Config{ClockWait: time.Hour}, 1)
	c.now = func() time.Time { return unset }
	if err := c.RecordAll([]Reading{{Data: map[string]any{"v": 1}}, {Data: map[string]any{"v": 2}}}); err != nil {
		t.Fatal(err)
	}
	c.boot.id[0] ^= 1 // those two were taken in an earlier boot: sent without a time
	if err := c.Record(map[string]any{"v": 3}); err != nil {
		t.Fatal(err)
	}
	run()
	r := f.requests()
	if len(r) != 1 || len(r[0].Messages) != 2 || r[0].Messages[0].TS != "" || len(*waits) != 1 || (*waits)[0] != 10*time.Second {
		t.Fatalf("requests %+v, waits %v", r, *waits)
	}
}

// A wall time before ClockEpoch in the queue (the C SDK records what its
// caller gave, and decides when sending) is not sent as the reading time.
func TestSendDropsAnUnsetClocksTime(t *testing.T) {
	f := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 200, nil, storedAnswer }}
	c, _, run := client(t, f, Config{}, 100)
	if _, err := c.q.record([]reading{{kind: timeWall, time: 300_000, data: []byte(`{"v":1}`)}}); err != nil {
		t.Fatal(err)
	}
	run()
	if r := f.requests(); len(r) != 1 || r[0].Messages[0].TS != "" || c.Status().NoTime != 1 {
		t.Fatalf("requests %+v, status %+v", r, c.Status())
	}
}
