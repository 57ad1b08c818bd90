package integration

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
)

// background runs a driver command; wait returns its output once it ended,
// failing the test unless it exited 0.
func (d *sdkDevice) background(t *testing.T, sdk, dir, command string, args ...int) (wait func() string) {
	t.Helper()
	c := d.cmd(t, sdk, dir, command, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return sync.OnceValue(func() string {
		if err := c.Wait(); err != nil {
			t.Errorf("%s driver %s %v: %v\n%s\nstderr: %s", sdk, command, args, err, out.Bytes(), tail(errb.Bytes(), 2000))
		}
		return out.String()
	})
}

// Readings recorded while ingest-api is down, then while ClickHouse is
// down, are all stored once each when they are back, by both SDKs.
func TestSDKOutages(t *testing.T) {
	ch := startOwnClickHouse(t)
	s := startStackOn(t, ch.addr, chaosEnv...)
	devs := map[string]*sdkDevice{}
	dirs := map[string]string{}
	for _, sdk := range sdks {
		devs[sdk], dirs[sdk] = newSDKDevice(t, s, "sdk-outage-"+sdk, "DSQ_MAX_BACKOFF_MS=4000"), t.TempDir()
	}
	phase := func(base int, down, up func()) {
		down()
		var waits []func() string
		for _, sdk := range sdks {
			waits = append(waits, devs[sdk].background(t, sdk, dirs[sdk], "run", 100, base, 90))
		}
		time.Sleep(5 * time.Second)
		up()
		for i, sdk := range sdks {
			if st := lastStatus(t, waits[i]()); st["queued"] != 0 || st["stored"] != 100 {
				t.Errorf("%s: %v after the outage, want 100 stored", sdk, st)
			}
		}
	}
	phase(0, func() { s.kill(t, "ingest-api", os.Kill) }, func() { s.start("ingest-api"); s.waitReady() })
	phase(1000, func() { ch.stop(t) }, func() { ch.start(t) })
	for _, sdk := range sdks {
		devs[sdk].expectStoredOnce(t, append(span(0, 100), span(1000, 100)...), nil)
	}
	if n := s.scrape(t, "ingest-api")[`ingest_api_requests_total{outcome="storage_failed",status="503"}`]; n == 0 {
		t.Errorf("no 503 while ClickHouse was down: the second outage was not seen")
	}
}

// The service's limits, as a device meets them: batches over
// MAX_BATCH_MESSAGES are split after a 413, and a rotation that retires the
// primary token moves the device to its secondary at once; nothing is lost
// or doubled.
func TestSDKServiceLimits(t *testing.T) {
	s := startStack(t, "MAX_BATCH_MESSAGES=5", "DEVICE_RATE=0", "LOG_LEVEL=info")
	for i, sdk := range sdks {
		d := newSDKDevice(t, s, "sdk-limits-"+sdk)
		dir := t.TempDir()
		base := (i + 1) * 1_000_000
		// 413: the default batch of 1,000 readings is cut until it fits.
		if st := lastStatus(t, d.exec(t, sdk, dir, "run", 40, base, 30)); st["queued"] != 0 || st["stored"] != 40 {
			t.Errorf("%s: %v, want 40 stored in batches of at most 5", sdk, st)
		}
		// A rotation: the device carries the next token as its secondary;
		// the primary is retired and the device goes on with the secondary
		// long before AuthWait (5 minutes).
		r := s.admin(t, http.MethodPost, "/devices/"+d.serial+"/tokens", `{"name":"fw-2"}`)
		next, _ := r.Body["token"].(string)
		if r.Status != 201 || next == "" {
			t.Fatalf("add token: %d %s", r.Status, r.Raw)
		}
		old := strings.TrimPrefix(d.env[0], "DSQ_TOKEN=")
		d.env = append(d.env, "DSQ_TOKEN2="+next)
		for _, step := range []string{"POST /tokens/fw-2/promote", "DELETE /tokens/token-1"} {
			method, path, _ := strings.Cut(step, " ")
			if r := s.admin(t, method, "/devices/"+d.serial+path, ""); r.Status != 200 {
				t.Fatalf("%s: %d %s", step, r.Status, r.Raw)
			}
		}
		// Every copy's registry has the retired token gone before the
		// device meets it (a reading of no connected input stores nothing).
		testenv.WaitFor(t, "the retired token refused", 10*time.Second, func() string { return "" }, nil, func() bool {
			return s.postBacklog(t, `{"serial":"`+d.serial+`","messages":[{"data":{"x":1}}]}`, bearer(old)).Status == 401
		})
		const refusals = `ingest_api_requests_total{outcome="invalid_token",status="401"}`
		before := s.scrape(t, "ingest-api")[refusals]
		if st := lastStatus(t, d.exec(t, sdk, dir, "run", 20, base+100, 30)); st["queued"] != 0 || st["stored"] != 20 {
			t.Errorf("%s after the rotation: %v, want 20 stored", sdk, st)
		}
		if n := s.scrape(t, "ingest-api")[refusals] - before; n != 1 {
			t.Errorf("%s met %v refusals of its retired primary, want 1 (then the secondary)", sdk, n)
		}
		d.expectStoredOnce(t, append(span(base, 40), span(base+100, 20)...), nil)
	}
	if n := s.scrape(t, "ingest-api")[`ingest_api_requests_total{outcome="too_many_messages",status="413"}`]; n < 2 {
		t.Errorf("%v answers 413: the batch limit was not met", n)
	}
}

// A device rate of 1 reading a second (DEVICE_RATE counts readings):
// batches of 10 readings, each taking the whole burst; the device waits out
// each 429's Retry-After, and nothing is lost or doubled.
func TestSDKRateLimit(t *testing.T) {
	s := startStack(t, "DEVICE_RATE=1", "DEVICE_BURST=1", "LOG_LEVEL=info")
	for i, sdk := range sdks {
		d := newSDKDevice(t, s, "sdk-rate-"+sdk, "DSQ_BATCH=10")
		base := (i + 1) * 1_000_000
		if st := lastStatus(t, d.exec(t, sdk, t.TempDir(), "run", 50, base, 60)); st["queued"] != 0 || st["stored"] != 50 {
			t.Errorf("%s at 1/s: %v, want 50 stored", sdk, st)
		}
		d.expectStoredOnce(t, span(base, 50), nil)
	}
	if n := s.scrape(t, "ingest-api")[`ingest_api_requests_total{outcome="rate_limited",status="429"}`]; n < 2 {
		t.Errorf("%v answers 429: the rate was not met", n)
	}
}
