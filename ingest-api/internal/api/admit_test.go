package api

import (
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/ingest-api/internal/ratelimit"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/registry"
)

// Each check of the front door refuses with its own outcome, answered
// once (one request counted, under that outcome), with a Retry-After when
// the client is told when to come back, and in the order of the checks:
// a refused address is refused whatever its body holds.
func TestEachRefusalIsAnsweredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	failures := guard.NewFailures(3, time.Minute)
	srv, s := frontServer(t, Deps{Failures: failures, Limiter: ratelimit.New(0.001, 1), Answers: edge.NewAnswers(zap.NewNop(), reg)})
	s.cache.Put(registry.Device{Serial: "mqtt-1", ConnectionType: registry.ConnectionMQTT, AccessToken: "tok-m"}, 1)
	s.cache.Put(registry.Device{Serial: "dev-2", ConnectionType: registry.ConnectionAPI, AccessToken: "tok-2"}, 1)
	from := func(ip string) *http.Client {
		return &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
	}
	// counted is the requests counted under code, and under every code.
	counted := func(code outcome.Code) (n, all float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() != "ingest_api_requests_total" {
					continue
				}
				all += m.GetCounter().GetValue()
				if m.GetLabel()[0].GetValue() == code.String() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n, all
	}
	for _, c := range []struct {
		name, ip, body, token string
		want                  outcome.Code
		retryAfter            int // the least Retry-After wanted in seconds; 0: none
	}{
		{"not JSON", "127.0.0.1", `{"serial":`, "tok-1", outcome.InvalidFormat, 0},
		{"no serial", "127.0.0.1", `{"data":{"t":1}}`, "tok-1", outcome.MissingSerial, 0},
		{"unknown device", "127.0.0.3", `{"serial":"nope","data":{"t":1}}`, "tok-1", outcome.DeviceNotFound, 0},
		{"wrong token", "127.0.0.3", `{"serial":"dev-1","data":{"t":1}}`, "tok-2", outcome.InvalidToken, 0},
		{"MQTT device", "127.0.0.3", `{"serial":"mqtt-1","data":{"t":1}}`, "tok-m", outcome.InvalidToken, 0},
		{"address past its failures", "127.0.0.3", `{"serial":"dev-1","data":{"t":1}}`, "tok-1", outcome.SourceRefused, 1},
		{"no pipeline slot", "127.0.0.1", `{"serial":"dev-2","data":{"t":1}}`, "tok-2", outcome.Overloaded, 1},
		{"device over its rate", "127.0.0.1", `{"serial":"dev-2","data":{"t":1}}`, "tok-2", outcome.RateLimited, 900},
	} {
		before, beforeAll := counted(c.want)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+EventPath, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := from(c.ip).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b := decode(t, resp)
		if resp.StatusCode != outcome.Lookup(c.want).Status || b.Success {
			t.Errorf("%s: %d %+v, want %d (%s)", c.name, resp.StatusCode, b, outcome.Lookup(c.want).Status, c.want)
		}
		ra := resp.Header.Get("Retry-After")
		if secs, err := strconv.Atoi(ra); c.retryAfter == 0 && ra != "" || c.retryAfter > 0 && (err != nil || secs < c.retryAfter) {
			t.Errorf("%s: Retry-After %q, want at least %d (0: none)", c.name, ra, c.retryAfter)
		}
		if n, all := counted(c.want); n-before != 1 || all-beforeAll != 1 {
			t.Errorf("%s: counted %v times under %s and %v in all, want once", c.name, n-before, c.want, all-beforeAll)
		}
	}
}

// An address's health checks beyond probeLimit in probeWindow are
// answered, truthfully, after probePause; another address's at once.
func TestHealthChecksArePacedPerAddress(t *testing.T) {
	srv, _ := frontServer(t, Deps{})
	get := func(ip string) (int, time.Duration) {
		c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
		start := time.Now()
		resp, err := c.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b := decode(t, resp)
		if resp.StatusCode != 200 || !b.Success {
			t.Fatalf("healthz from %s: %d %+v", ip, resp.StatusCode, b)
		}
		return resp.StatusCode, time.Since(start)
	}
	for i := range probeLimit {
		if _, took := get("127.0.0.5"); took > probePause/2 {
			t.Fatalf("check %d of %d took %v: paced within the limit", i+1, probeLimit, took)
		}
	}
	if _, took := get("127.0.0.5"); took < probePause {
		t.Errorf("check %d took %v, want at least %v", probeLimit+1, took, probePause)
	}
	if _, took := get("127.0.0.6"); took > probePause/2 {
		t.Errorf("another address's check took %v", took)
	}
}

// A check that panics (Recover answers 500) still gives back what the
// request held: the body's memory and its work slot.
func TestAPanickingCheckGivesTheBodyBack(t *testing.T) {
	budget, work := guard.NewBudget(1<<20), guard.NewWork()
	_, s := frontServer(t, Deps{Budget: budget, Work: work})
	big := `{"serial":"dev-1","data":{"x":"` + strings.Repeat("y", 64<<10) + `"}}`
	// More than the work slots: one kept by a panic would leave the
	// next bodies waiting for it, then answered 503.
	for range 2*runtime.GOMAXPROCS(0) + 2 {
		e := echo.New()
		e.Use(middleware.Recover())
		e.POST(EventPath, func(c echo.Context) error {
			return s.ingest(c, func([]byte, string) (string, string, int, outcome.Code, string) { panic("a parser's bug") }, nil)
		})
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, EventPath, strings.NewReader(big)))
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("a panicking check answered %d", rec.Code)
		}
		if used := budget.Used(); used != 0 {
			t.Fatalf("%d bytes of the body budget still held after the answer", used)
		}
	}
}
