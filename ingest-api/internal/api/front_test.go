package api

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/pkg/registry"
)

// frontServer is ingest-api's HTTP surface on a real listener, with one
// device ("dev-1", token "tok-1") and no pipeline behind it: what these
// tests look at is answered before a request would be published.
func frontServer(t *testing.T, d Deps) (*httptest.Server, *Server) {
	t.Helper()
	d.Log, d.Registry = zap.NewNop(), &registry.Store{}
	if d.Limits.MaxBodyBytes == 0 {
		d.Limits.MaxBodyBytes = 1 << 20
	}
	d.Limits.DiscardBytes, d.Limits.MaxInFlight = 1<<20, 0
	d.Limits.BodyTimeout = 15 * time.Second
	e, s := New(d)
	s.cache = registry.NewCache()
	s.cache.Put(registry.Device{Serial: "dev-1", ConnectionType: registry.ConnectionAPI, AccessToken: "tok-1"}, 1)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, s
}

// answer reads an answer from a raw connection.
func answer(t *testing.T, r io.Reader) (*http.Response, Body) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, decode(t, resp)
}

// decode reads the contract's JSON body of resp and closes it.
func decode(t *testing.T, resp *http.Response) Body {
	t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var b Body
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, raw)
	}
	return b
}

// A body that stalls is answered 408 after the grace period (not after
// the server's read timeout), and the connection is closed; so is a gzip body.
func TestStalledBodyIsCutAfterTheGrace(t *testing.T) {
	srv, _ := frontServer(t, Deps{Limits: Limits{BodyMinRate: 16 << 10}})
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, gz := range []bool{false, true} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		body := []byte(`{"serial":"dev-1","data":{"temp":1}}`)
		enc := ""
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body, enc = b.Bytes(), "Content-Encoding: gzip\r\n"
		}
		start := time.Now()
		fmt.Fprintf(conn, "POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", enc, len(body), body[:len(body)-3])
		resp, b := answer(t, conn)
		took := time.Since(start)
		conn.Close()
		if resp.StatusCode != 408 || b.Message != "Request timeout" || b.Error != "The request body did not arrive in time" || !resp.Close {
			t.Fatalf("gzip %v: %d %+v close=%v", gz, resp.StatusCode, b, resp.Close)
		}
		if took < bodyGrace || took > bodyGrace+2*time.Second {
			t.Fatalf("gzip %v: answered after %v, want about %v", gz, took, bodyGrace)
		}
	}
}

func postTo(t *testing.T, url string, body []byte, hdr map[string]string) (*http.Response, Body) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, decode(t, resp)
}

func gzipped(parts ...[]byte) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	for _, p := range parts {
		_, _ = zw.Write(p)
	}
	_ = zw.Close()
	return b.Bytes()
}

// A decompression bomb is refused once it inflates more than the ratio
// allows: 413, long before its inflated size is reached, and its memory is
// given back. An honest gzip body passes the body checks.
func TestGzipBombIsRefused(t *testing.T) {
	srv, s := frontServer(t, Deps{Limits: Limits{MaxBodyBytes: 64 << 20}, Budget: guard.NewBudget(1 << 30)})
	bomb := gzipped([]byte(`{"serial":"dev-1","data":{"x":"`), make([]byte, 60<<20), []byte(`"}}`))
	resp, b := postTo(t, srv.URL+"/api/v1/deviceapi/event", bomb, map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != 413 || b.Message != "Payload too large" {
		t.Fatalf("a %d-byte gzip body inflating to 60 MiB: %d %+v, want 413", len(bomb), resp.StatusCode, b)
	}
	if used := s.Budget.Used(); used != 0 {
		t.Fatalf("%d bytes of the budget not given back", used)
	}
	honest := gzipped([]byte(`{"serial":"dev-1","data":{"temp":1}}`))
	resp, b = postTo(t, srv.URL+"/api/v1/deviceapi/event", honest, map[string]string{"Content-Encoding": "gzip"})
	if resp.StatusCode != 401 || b.Message != "Missing access token" {
		t.Fatalf("an honest gzip body: %d %+v, want it read (then 401 for its missing token)", resp.StatusCode, b)
	}
}

// Bodies beyond the free part take memory from the budget: when it is
// spent, a large body is answered 503 + Retry-After at once, while small
// bodies still pass.
func TestBodyMemoryBudget(t *testing.T) {
	budget := guard.NewBudget(1 << 20)
	srv, s := frontServer(t, Deps{Budget: budget})
	if !budget.Take(1<<20 - 100<<10) {
		t.Fatal("take")
	}
	large := []byte(`{"serial":"dev-1","data":{"x":"` + strings.Repeat("a", 200<<10) + `"}}`)
	resp, b := postTo(t, srv.URL+"/api/v1/deviceapi/event", large, map[string]string{"Authorization": "Bearer tok-1"})
	if resp.StatusCode != 503 || b.Message != "Failed to process message" || b.Error != errNoBudget.Error() || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a 200 KiB body with 100 KiB of budget left: %d %+v", resp.StatusCode, b)
	}
	small := []byte(`{"serial":"nope","data":{"temp":1}}`)
	resp, b = postTo(t, srv.URL+"/api/v1/deviceapi/event", small, map[string]string{"Authorization": "Bearer tok-1"})
	if resp.StatusCode != 404 {
		t.Fatalf("a small body with the budget spent: %d %+v, want it read (404)", resp.StatusCode, b)
	}
	if used := s.Budget.Used(); used != 1<<20-100<<10 {
		t.Fatalf("budget used %d after the answers, want only what the test took", used)
	}
}

// One address guessing device tokens is refused (429 + Retry-After,
// before its body is read) after SOURCE_AUTH_FAILURES failures; the device
// keeps posting from its own address. (The workspace listener shares the
// count: internal/workspace's TestGuessingAddressIsRefusedOnBoth.)
func TestGuessingAddressIsRefused(t *testing.T) {
	failures := guard.NewFailures(20, time.Minute)
	srv, _ := frontServer(t, Deps{Failures: failures})
	attacker := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	guess := func(i int) int {
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/deviceapi/event", strings.NewReader(`{"serial":"dev-1","data":{"temp":1}}`))
		req.Header.Set("Authorization", fmt.Sprintf("Bearer guess-%d", i))
		resp, err := attacker.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		return resp.StatusCode
	}
	for i := range 20 {
		if got := guess(i); got != 401 {
			t.Fatalf("guess %d: %d, want 401", i+1, got)
		}
	}
	for i := range 5 {
		if got := guess(100 + i); got != 429 {
			t.Fatalf("guess %d after 20 failures: %d, want 429", 21+i, got)
		}
	}
	// The device posts from 127.0.0.1 and is not locked out; it gets past
	// authentication (to the in-flight bound, zero in this server).
	resp2, b := postTo(t, srv.URL+"/api/v1/deviceapi/event", []byte(`{"serial":"dev-1","data":{"temp":1}}`), map[string]string{"Authorization": "Bearer tok-1"})
	if resp2.StatusCode != 503 || b.Error != "too many requests in flight, retry later" {
		t.Fatalf("the device under attack: %d %+v", resp2.StatusCode, b)
	}
}

// A refused address that stalls a large body is answered when its first
// refuseDiscard bytes stop arriving (after bodyGrace), not at once: an
// attacker reconnecting after each answer comes back once per grace per
// connection, as a stalled small body does, not as fast as it can dial. A
// refused address whose small body has arrived is answered at once.
func TestRefusedStalledBodyWaitsForTheGrace(t *testing.T) {
	failures := guard.NewFailures(1, time.Minute)
	srv, _ := frontServer(t, Deps{Failures: failures, Limits: Limits{BodyMinRate: 16 << 10}})
	addr := strings.TrimPrefix(srv.URL, "http://")
	failures.Fail(netip.MustParseAddr("127.0.0.2"))
	for _, c := range []struct {
		length, sent int
		stalled      bool
	}{{1 << 20, 1 << 10, true}, {4 << 10, 1 << 10, true}, {1 << 10, 1 << 10, false}} {
		conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		fmt.Fprintf(conn, "POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", c.length, bytes.Repeat([]byte("a"), c.sent))
		resp, b := answer(t, conn)
		took := time.Since(start)
		conn.Close()
		if resp.StatusCode != 429 || b.Error != "Too many failed authentications from this address" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%d of %d bytes: %d %+v, want 429 with Retry-After", c.sent, c.length, resp.StatusCode, b)
		}
		if c.stalled && (took < bodyGrace-100*time.Millisecond || !resp.Close) {
			t.Fatalf("%d of %d bytes, stalled: answered after %v (close %v), want after the %v grace, closed", c.sent, c.length, took, resp.Close, bodyGrace)
		}
		if !c.stalled && (took >= bodyGrace || resp.Close) {
			t.Fatalf("a whole small body: answered after %v (close %v), want at once, kept open", took, resp.Close)
		}
	}
}

// A request costs its readings, or its bytes in 16 KiB tokens if more.
func TestRateCost(t *testing.T) {
	for _, tc := range []struct{ readings, bytes, want int }{
		{1, 150, 1}, {1000, 150_000, 1000}, {1, 1 << 20, 64}, {1, 16<<10 + 1, 2}, {3, 0, 3},
	} {
		if got := cost(tc.readings, tc.bytes); got != tc.want {
			t.Errorf("cost(%d readings, %d bytes) = %d, want %d", tc.readings, tc.bytes, got, tc.want)
		}
	}
}

func TestSerialOfABodyTooLarge(t *testing.T) {
	long := strings.Repeat("x", 2*sniffBytes)
	for _, c := range []struct{ head, rest, want string }{
		{`{"serial":"a","data":{"temp":"` + long, "", "a"},
		{`{"data":{"x":[1,{"serial":"inner"}],"y":{}}, "serial" : "b", "data2":"` + long, "", "b"},
		{"", `{"serial":"c","data":{"v":"` + long, "c"},              // nothing read yet: its Content-Length was over the limit
		{`{"data":{"temp":"` + long + `"},"serial":"late"}`, "", ""}, // not in the first bytes
		{`{"serial":5}`, "", ""},
		{`[{"serial":"d"}]`, "", ""},
		{"\x1f\x8b\x08\x00", "", ""}, // gzip
		{"", "", ""},
	} {
		if got := serialIn([]byte(c.head), strings.NewReader(c.rest)); got != c.want {
			t.Errorf("serialIn(%.40q, %.40q) = %q, want %q", c.head, c.rest, got, c.want)
		}
	}
}

// A device endpoint's path with a trailing slash is the endpoint: the same
// answer as without it, not a 404, timed under the endpoint's route.
func TestDeviceEndpointsWithATrailingSlash(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, _ := frontServer(t, Deps{Limits: Limits{MaxBatchMessages: 10}, Answers: edge.NewAnswers(zap.NewNop(), reg)})
	for path, body := range map[string]string{
		"/api/v1/deviceapi/event":  `{"serial":"dev-1","data":{"temp":1}}`,
		"/api/v1/deviceapi/events": `{"serial":"dev-1","messages":[{"data":{"temp":1}}]}`,
	} {
		for _, p := range []string{path, path + "/"} {
			req, _ := http.NewRequest("POST", srv.URL+p, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer wrong-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b := decode(t, resp)
			if resp.StatusCode != 401 || b.Message != "Invalid access token" || b.Error != "Invalid access token for device with serial dev-1" {
				t.Errorf("POST %s: %d %+v, want 401 Invalid access token", p, resp.StatusCode, b)
			}
		}
	}
	// Two requests timed under each endpoint's route, none under another.
	timed := map[string]uint64{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ingest_api_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			timed[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	if want := map[string]uint64{EventPath: 2, EventsPath: 2}; !maps.Equal(timed, want) {
		t.Errorf("timed by route %v, want %v", timed, want)
	}
	// Another method on the slash path is the endpoint's 405, as without it.
	resp, err := http.Get(srv.URL + EventPath + "/")
	if err != nil {
		t.Fatal(err)
	}
	if b := decode(t, resp); resp.StatusCode != 405 || resp.Header.Get("Allow") == "" {
		t.Errorf("GET %s/: %d %+v (Allow %q), want 405", EventPath, resp.StatusCode, b, resp.Header.Get("Allow"))
	}
}
