package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/registry"
)

// newTokenKey is the key the rotation test moves to from tokenKey.
const newTokenKey = "e2e-new-token-key-9c4e1a7b3d5f60812a4b6c8d0e2f4a6b"

// devicePoster posts one device's readings to every ingest-api copy it is
// given, one after another, until stopped, and keeps every answer.
type devicePoster struct {
	s      *stack
	body   string
	token  string
	mu     sync.Mutex
	bases  []string
	stored map[string]int // per copy
	others []string       // every answer but "stored", in order
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
}

func startPoster(t *testing.T, s *stack, serial, token string, bases ...string) *devicePoster {
	p := &devicePoster{s: s, body: `{"serial":"` + serial + `","data":{"t":1}}`, token: token, bases: bases,
		stored: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	t.Cleanup(p.halt)
	return p
}

func (p *devicePoster) halt() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

func (p *devicePoster) run() {
	defer close(p.done)
	for {
		p.mu.Lock()
		bases := slices.Clone(p.bases)
		p.mu.Unlock()
		for _, base := range bases {
			select {
			case <-p.stop:
				return
			default:
			}
			p.post(base)
			// A device's pace, within DEVICE_RATE across the copies.
			time.Sleep(25 * time.Millisecond)
		}
	}
}

func (p *devicePoster) post(base string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/deviceapi/event", strings.NewReader(p.body))
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.s.http.Do(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.others = append(p.others, fmt.Sprintf("%s: %v", base, err))
		return
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode == http.StatusOK && strings.Contains(b.String(), storedMsg) {
		p.stored[base]++
		return
	}
	p.others = append(p.others, fmt.Sprintf("%s: %d %s", base, resp.StatusCode, bytes.TrimSpace(b.Bytes())))
}

// setBases changes the copies posted to, and returns once a post to each
// of them has been answered since: none is still in flight to a copy
// left out.
func (p *devicePoster) setBases(t *testing.T, bases ...string) {
	t.Helper()
	p.mu.Lock()
	p.bases = bases
	p.mu.Unlock()
	for _, base := range bases {
		p.storedOn(t, base, 2)
	}
}

// storedOn waits until n more posts to base have been stored.
func (p *devicePoster) storedOn(t *testing.T, base string, n int) {
	t.Helper()
	p.mu.Lock()
	want := p.stored[base] + n
	p.mu.Unlock()
	eventually(t, 30*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stored[base] >= want || len(p.others) > 0
	})
	p.check(t)
}

// finish stops posting and checks every answer.
func (p *devicePoster) finish(t *testing.T) {
	t.Helper()
	p.halt()
	p.check(t)
}

func (p *devicePoster) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.others) > 0 {
		t.Fatalf("a device holding a valid token was not stored %d times during the rotation, first: %s", len(p.others), p.others[0])
	}
}

// tokenKeysOf returns the TOKEN_KEY ids the registry record of serial
// holds its tokens under.
func tokenKeysOf(t *testing.T, s *stack, serial string) []string {
	t.Helper()
	js := testenv.OperatorJS(t, s.nats.ClientURL())
	kv, err := js.KeyValue(context.Background(), bus.DefaultNames.RegistryBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), base64.RawURLEncoding.EncodeToString([]byte(serial)))
	if err != nil {
		t.Fatal(err)
	}
	var d registry.Device
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range d.Tokens {
		ids = append(ids, tk.Key)
	}
	return ids
}

func keyID(t *testing.T, key string) string {
	t.Helper()
	k, err := registry.NewKeyring(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// TestTokenKeyRotationLocksNobodyOut rolls ingest-api from TOKEN_KEY=old
// to new,old and then to new while a device posts throughout: to the copy
// on old, then to it and a copy on new,old (a token added on the new copy
// works on the old one), then to the new copy alone once the old one has
// stopped, and last to a copy on new alone. Every post is stored; the
// records stay under old while a copy reads old only, and are under new
// once it has gone. A copy on a key it cannot read them with answers 503.
func TestTokenKeyRotationLocksNobodyOut(t *testing.T) {
	s := startStack(t) // TOKEN_KEY=tokenKey: the old key
	oldID, newID := keyID(t, tokenKey), keyID(t, newTokenKey)
	r := s.admin(t, http.MethodPut, "/devices/rotating", `{"inputs":[{"name":"t","entity":"rot","entityInput":"t"}]}`)
	token, _ := r.Body["accessToken"].(string)
	if r.Status != 200 || token == "" {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	oldCopy := s.base
	p := startPoster(t, s, "rotating", token, oldCopy)
	p.storedOn(t, oldCopy, 5)

	// Rolling: a copy on new,old joins.
	newCopy := "http://" + freeAddr(t)
	s.start("ingest-api.2", "HTTP_ADDR="+strings.TrimPrefix(newCopy, "http://"), "TOKEN_KEY="+newTokenKey+","+tokenKey)
	s.bases = []string{oldCopy, newCopy}
	s.waitReady()
	p.setBases(t, oldCopy, newCopy)
	p.storedOn(t, oldCopy, 5)
	p.storedOn(t, newCopy, 5)
	// A token added on the new copy authenticates on the old one.
	s.base = newCopy
	r = s.admin(t, http.MethodPost, "/devices/rotating/tokens", `{"name":"added"}`)
	added, _ := r.Body["token"].(string)
	if r.Status != 201 || added == "" {
		t.Fatalf("add a token on the copy on new,old: %d %s", r.Status, r.Raw)
	}
	// Once the old copy has the change (a later one to the same record
	// shows in its listing, which its cache answers).
	if r := s.admin(t, http.MethodPut, "/devices/rotating", `{"inputs":[{"name":"t","entity":"rot","entityInput":"t"},{"name":"seen"}]}`); r.Status != 200 {
		t.Fatalf("update on the copy on new,old: %d %s", r.Status, r.Raw)
	}
	s.base = oldCopy
	eventually(t, 5*time.Second, func() bool {
		return bytes.Contains(s.admin(t, http.MethodGet, "/devices?prefix=rotating", "").Raw, []byte(`"seen"`))
	})
	expect(t, s.post(t, `{"serial":"rotating","data":{"t":2}}`, bearer(added)), 200, storedMsg, "")
	if got := tokenKeysOf(t, s, "rotating"); !slices.Equal(got, []string{oldID, oldID}) {
		t.Fatalf("while a copy reads the old key alone, the record's tokens are under %v, want the old key %s", got, oldID)
	}

	// The old copy stops (posts go to the new one first).
	p.setBases(t, newCopy)
	s.kill(t, "ingest-api", os.Interrupt)
	eventually(t, 30*time.Second, func() bool {
		return slices.Equal(tokenKeysOf(t, s, "rotating"), []string{newID, newID})
	})
	p.storedOn(t, newCopy, 5)

	// The last step: a copy on the new key alone.
	lastCopy := "http://" + freeAddr(t)
	s.start("ingest-api.3", "HTTP_ADDR="+strings.TrimPrefix(lastCopy, "http://"), "TOKEN_KEY="+newTokenKey)
	s.bases = []string{newCopy, lastCopy}
	s.waitReady()
	p.setBases(t, newCopy, lastCopy)
	p.storedOn(t, lastCopy, 5)
	s.base = lastCopy
	expect(t, s.post(t, `{"serial":"rotating","data":{"t":3}}`, bearer(added)), 200, storedMsg, "")

	// A copy started on a key no record is under (a mistake) cannot check
	// the device's token: it answers 503 + Retry-After, never 401, and
	// does not count it against the address (past SOURCE_AUTH_FAILURES).
	strayCopy := "http://" + freeAddr(t)
	s.start("ingest-api.4", "HTTP_ADDR="+strings.TrimPrefix(strayCopy, "http://"), "TOKEN_KEY=e2e-stray-token-key-5d7f9b1c3e5a7092b4d6f8a0c2e4")
	s.bases = []string{strayCopy}
	s.waitReady()
	s.base = strayCopy
	for range 25 {
		r := s.post(t, `{"serial":"rotating","data":{"t":4}}`, bearer(token))
		expect(t, r, 503, "Failed to process message", "The access token cannot be checked on this server yet, retry later")
		if r.Header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
	}
	s.kill(t, "ingest-api.4", os.Interrupt)
	p.storedOn(t, lastCopy, 5)
	p.finish(t)
}
