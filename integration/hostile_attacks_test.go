package integration

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// target is what an attack aims at: ingest-api's public address and its
// operations listener (where the Kubernetes probes go).
type target struct{ base, ws, ops string }

// attackFunc attacks until ctx ends and counts what it got, by kind.
type attackFunc func(ctx context.Context, s target) map[string]int

// hostileAttacks are the attacks of the suite, in order, with what each
// must get from the service.
func hostileAttacks() []hostileAttack {
	guessed := func(got map[string]int) string {
		if got["401"] > 20 || got["429"] == 0 || got["429_without_retry_after"] > 0 {
			return "want at most 20 guesses answered 401 (SOURCE_AUTH_FAILURES), the rest 429 with Retry-After"
		}
		return ""
	}
	// A stalled upload is answered no sooner than its grace (2 s) after
	// its last byte, refused address or not: each of the 1,000
	// connections is answered at most once per grace (and once more).
	paced := func(got map[string]int) string {
		_, d := hostileTiming()
		answered := 0
		for k, n := range got {
			if k != "held_to_the_end" && k != "dial_error" {
				answered += n
			}
		}
		if limit := 1000 * int(d/(2*time.Second)+1); answered > limit {
			return fmt.Sprintf("%d stalled uploads answered in %v, want <= %d: answered before their grace", answered, d, limit)
		}
		return ""
	}
	return []hostileAttack{
		{"stalled-gzip-bombs", func() attackFunc { return stalledUploads(1000, 50, gzipBody(1<<20, false), 8, true) }, paced},
		{"stalled-gzip-within-ratio", func() attackFunc { return stalledUploads(1000, 50, gzipBody(1<<20, true), 8, true) }, paced},
		{"slow-plain-bodies", func() attackFunc {
			return stalledUploads(1000, 50, bytes.Repeat([]byte("a"), 1<<20), 1<<20-1024, false)
		}, paced},
		{"slowloris-one-address", func() attackFunc { return slowloris(1, 700) }, func(got map[string]int) string {
			if got["429"] == 0 {
				return "no connection beyond SOURCE_MAX_CONNS (512) was refused"
			}
			return ""
		}},
		// 3,000 connections within MAX_CONNS (4,096), all held while
		// the fleet posts. Beyond it, connections are closed to make room
		// (TestConnsEvictTheUnusedFirst), at the cost of the attacker's
		// reconnects: docs/guarantees.md gives the figures.
		{"slowloris-many-addresses", func() attackFunc { return slowloris(20, 150) }, nil},
		{"decompression-bombs", func() attackFunc { return bombs(8) }, func(got map[string]int) string {
			if got["413"] == 0 {
				return "no bomb answered 413"
			}
			return ""
		}},
		{"device-token-guessing", func() attackFunc { return guessing("/api/v1/deviceapi/event", true) }, guessed},
		{"admin-token-guessing", func() attackFunc { return guessing("/api/v1/admin/devices", false) }, guessed},
		{"health-flood", func() attackFunc { return healthFlood(32) }, func(got map[string]int) string {
			if got["probe_failures"] > 0 {
				return "the readiness probe failed"
			}
			return ""
		}},
		{"huge-serials", hugeSerials, nil},
		{"workspace-read-flood", func() attackFunc { return readFlood(16) }, func(got map[string]int) string {
			// Reads are answered, or refused with 503 when they wait more
			// than a second for one of the few read slots; nothing else.
			if got["200"]+got["503"] == 0 || got["conn_error"] > 0 {
				return "reads neither answered nor refused"
			}
			return ""
		}},
		{"deep-and-wide-json", deepAndWide, func(got map[string]int) string {
			if got["400"] == 0 {
				return "deep JSON not answered 400"
			}
			return ""
		}},
	}
}

// attackerIP is the i-th attacking address: 127.1.x.y, apart from the
// fleet's 127.0.0.1.
func attackerIP(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250) }

// gzipBody is a JSON body that inflates to about size bytes: zeros
// (inflating ~1000x, a bomb) or zeros with a few random bytes per KiB
// (~30x, within the inflate ratio, so it is inflated in full).
func gzipBody(size int, withinRatio bool) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	_, _ = io.WriteString(zw, `{"serial":"hostile-0","data":{"x":"`)
	block := make([]byte, 1024)
	for i := range block {
		block[i] = 'a'
	}
	for n := 0; n < size; n += len(block) {
		if withinRatio {
			for j := 0; j < 24; j++ {
				block[rand.IntN(len(block))] = byte('a' + rand.IntN(26))
			}
		}
		_, _ = zw.Write(block)
	}
	_, _ = io.WriteString(zw, `"}}`)
	_ = zw.Close()
	return b.Bytes()
}

// stalledUploads opens conns connections spread over addrs addresses,
// within the first second; each sends its headers and all of body but its
// last held bytes, stalls, waits for the answer, and starts over.
func stalledUploads(conns, addrs int, body []byte, held int, gz bool) attackFunc {
	return func(ctx context.Context, s target) map[string]int {
		host := strings.TrimPrefix(s.base, "http://")
		enc := ""
		if gz {
			enc = "Content-Encoding: gzip\r\n"
		}
		head := fmt.Sprintf("POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hostile-tok-5f0c2b9e71d4-0\r\n%sContent-Length: %d\r\n\r\n", enc, len(body))
		var answers tally
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dial := attackerDial(attackerIP(i % addrs))
				sleepCtx(ctx, time.Duration(i)*time.Second/time.Duration(conns))
				for ctx.Err() == nil {
					answers.add(stallOnce(ctx, dial, host, head, body[:len(body)-held]))
					sleepCtx(ctx, 100*time.Millisecond) // a tool's pace (see slowloris)
				}
			}()
		}
		wg.Wait()
		return answers.counts()
	}
}

// stallOnce sends head and part, then waits (until ctx ends) for an answer.
func stallOnce(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), host, head string, part []byte) string {
	c, err := dial(ctx, "tcp", host)
	if err != nil {
		sleepCtx(ctx, 100*time.Millisecond)
		return "dial_error"
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if _, err := io.WriteString(c, head); err != nil {
		return "write_error"
	}
	_, _ = c.Write(part) // the server may answer (413) and close before all of it is sent
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if ctx.Err() != nil {
			return "held_to_the_end"
		}
		return "no_answer"
	}
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// slowloris holds perAddr connections from each of addrs addresses
// (opened at once), each with headers that never end, and opens a new one
// when one is answered or closed.
func slowloris(addrs, perAddr int) attackFunc {
	return func(ctx context.Context, s target) map[string]int {
		host := strings.TrimPrefix(s.base, "http://")
		var answers tally
		var wg sync.WaitGroup
		for i := range addrs * perAddr {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dial := attackerDial(attackerIP(100 + i%addrs))
				// Within the first second, as a tool opens them one after
				// another (and as stalledUploads does).
				sleepCtx(ctx, time.Duration(i)*time.Second/time.Duration(addrs*perAddr))
				for ctx.Err() == nil {
					c, err := dial(ctx, "tcp", host)
					if err != nil {
						answers.add("dial_error")
						sleepCtx(ctx, 100*time.Millisecond)
						continue
					}
					// Headers that never end: the connection is held until
					// the server answers or closes it.
					stop := context.AfterFunc(ctx, func() { _ = c.Close() })
					if _, err := io.WriteString(c, "POST /api/v1/deviceapi/event HTTP/1.1\r\nHost: x\r\nX-Slow: "); err == nil {
						resp, err := http.ReadResponse(bufio.NewReader(c), nil)
						switch {
						case ctx.Err() != nil:
						case err != nil:
							answers.add("closed")
						default:
							resp.Body.Close()
							answers.add(strconv.Itoa(resp.StatusCode))
						}
					}
					stop()
					_ = c.Close()
					// Reconnect at a tool's pace (a connection flood with
					// no pause is another attack: its cost is the TCP
					// handshakes, on this shared machine the attacker's).
					sleepCtx(ctx, 100*time.Millisecond)
				}
			}()
		}
		wg.Wait()
		return answers.counts()
	}
}

// bombs posts decompression bombs (10 MiB of zeros in ~10 KB) from conc
// workers on as many addresses, as fast as answers come.
func bombs(conc int) attackFunc {
	bomb := gzipBody(10<<20, false)
	return func(ctx context.Context, s target) map[string]int {
		return flood(ctx, conc, func(w int) string { return attackerIP(300 + w) }, func(ctx context.Context, _, _ int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/v1/deviceapi/event", bytes.NewReader(bomb))
			req.Header.Set("Content-Encoding", "gzip")
			req.Header.Set("Authorization", "Bearer hostile-tok-5f0c2b9e71d4-0")
			return req
		})
	}
}

// flood sends conc requests at a time (worker w from address ip(w)), each
// as soon as the last was answered (100 ms after a refusal), until ctx
// ends, and counts the answers.
func flood(ctx context.Context, conc int, ip func(w int) string, request func(ctx context.Context, w, n int) *http.Request) map[string]int {
	clients := map[string]*http.Client{}
	for w := range conc {
		if clients[ip(w)] == nil {
			clients[ip(w)] = attackerClient(ip(w), conc)
		}
	}
	var answers tally
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				got := doStatus(clients[ip(w)], request(ctx, w, n))
				answers.add(got)
				if got == "429" || got == "conn_error" {
					sleepCtx(ctx, 100*time.Millisecond) // refused: a tool's pace (see slowloris)
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	return answers.counts()
}

func doStatus(c *http.Client, req *http.Request) string {
	resp, err := c.Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return "cancelled"
		}
		return "conn_error"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == 429 && resp.Header.Get("Retry-After") == "" {
		return "429_without_retry_after"
	}
	return strconv.Itoa(resp.StatusCode)
}

// guessing tries tokens from one address, 8 at a time, as fast as answers
// come: at most SOURCE_AUTH_FAILURES (20) wrong guesses may be answered
// 401 in the window, the rest 429 + Retry-After.
func guessing(path string, device bool) attackFunc {
	ip := attackerIP(400)
	if !device {
		ip = attackerIP(401)
	}
	return func(ctx context.Context, s target) map[string]int {
		return flood(ctx, 8, func(int) string { return ip }, func(ctx context.Context, w, n int) *http.Request {
			var req *http.Request
			if device {
				req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(`{"serial":"hostile-0","data":{"v":1}}`))
			} else {
				req, _ = http.NewRequestWithContext(ctx, http.MethodGet, s.ws+path, nil)
			}
			req.Header.Set("Authorization", fmt.Sprintf("Bearer guess-%d-%d", w, n))
			return req
		})
	}
}

// healthFlood asks the public port's /readyz from conc connections of one
// address as fast as answers come, while the operations listener's
// /readyz (the Kubernetes probe) must keep answering 200.
func healthFlood(conc int) attackFunc {
	return func(ctx context.Context, s target) map[string]int {
		probeFails := make(chan int, 1)
		go func() {
			fails := 0
			probe := &http.Client{Timeout: time.Second}
			for ctx.Err() == nil {
				resp, err := probe.Get("http://" + s.ops + "/readyz")
				if err != nil || resp.StatusCode != 200 {
					fails++
				}
				if err == nil {
					resp.Body.Close()
				}
				sleepCtx(ctx, 100*time.Millisecond)
			}
			probeFails <- fails
		}()
		got := flood(ctx, conc, func(int) string { return attackerIP(500) }, func(ctx context.Context, _, _ int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/readyz", nil)
			return req
		})
		got["probe_failures"] = <-probeFails
		return got
	}
}

// hugeSerials posts bodies with a 256 KiB serial (answered 404 with the
// serial, as the spec says) from 4 addresses.
func hugeSerials() attackFunc {
	body := []byte(`{"serial":"` + strings.Repeat("S", 256<<10) + `","data":{"v":1}}`)
	return func(ctx context.Context, s target) map[string]int {
		return flood(ctx, 4, func(w int) string { return attackerIP(600 + w) }, func(ctx context.Context, _, _ int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/v1/deviceapi/event", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer whatever-token")
			return req
		})
	}
}

// deepAndWide posts 1 MiB of nested arrays and a data object of 50,000
// members, from 4 addresses.
func deepAndWide() attackFunc {
	const depth = 500_000
	deep := []byte(`{"serial":"hostile-0","data":{"v":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`)
	var wide strings.Builder
	wide.WriteString(`{"serial":"hostile-0","data":{`)
	for i := range 50_000 {
		if i > 0 {
			wide.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"k%d":%d`, i, i)
	}
	wide.WriteString(`}}`)
	bodies := [][]byte{deep, []byte(wide.String())}
	return func(ctx context.Context, s target) map[string]int {
		return flood(ctx, 4, func(w int) string { return attackerIP(700 + w) }, func(ctx context.Context, _, n int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/api/v1/deviceapi/event", bytes.NewReader(bodies[n%2]))
			req.Header.Set("Authorization", "Bearer hostile-tok-5f0c2b9e71d4-0-wrong")
			return req
		})
	}
}

// readFlood reads the Messages view of a device whose messages are ~700 KB
// each (hostileBigMessages of them), 10,000 at a time, from conc
// connections with the admin token, as fast as answers come.
func readFlood(conc int) attackFunc {
	return func(ctx context.Context, s target) map[string]int {
		return flood(ctx, conc, func(int) string { return attackerIP(800) }, func(ctx context.Context, _, _ int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.ws+"/api/v1/admin/devices/hostile-big/messages?limit=10000", nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			return req
		})
	}
}
