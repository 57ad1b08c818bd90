package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/bus"
)

// TestDeviceTokensAtRestAndRotation: a registry written by the code before
// token digests is read and upgraded; a device rotates from one token to
// the next with both valid in between, the retired one refused after; the
// Messages view names the token each message used; and no token is left
// in the clear in the registry bucket (any revision) or any program's log.
func TestDeviceTokensAtRestAndRotation(t *testing.T) {
	ns := testenv.NATSControlFor(t, namesIn(nil))
	s := newStack(t, testenv.ClickHouseAddr(t), ns.Server().ClientURL())
	s.nats = ns
	js := testenv.OperatorJS(t, ns.ClientURL())
	ctx := context.Background()
	// The bucket and a record exactly as the code before wrote them.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.DefaultNames.RegistryBucket, History: 1, MaxValueSize: 1 << 20, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	const legacyToken = "legacy-token-5f1c2b"
	if _, err := kv.Put(ctx, base64.RawURLEncoding.EncodeToString([]byte("old-dev")),
		[]byte(`{"serial":"old-dev","connectionType":"API","accessToken":"`+legacyToken+`","inputs":[{"name":"t","entity":"tok","entityInput":"t"}]}`)); err != nil {
		t.Fatal(err)
	}
	s.start("writer-worker")
	s.start("mapper-worker")
	s.start("ingest-api")
	s.waitReady()

	post := func(serial, token string) reply {
		t.Helper()
		return s.post(t, `{"serial":"`+serial+`","data":{"t":1}}`, map[string]string{"Authorization": "Bearer " + token})
	}
	expect(t, post("old-dev", legacyToken), 200, "Message processed and data stored successfully", "")
	eventually(t, 5*time.Second, func() bool { // the legacy record upgraded
		e, err := kv.Get(ctx, base64.RawURLEncoding.EncodeToString([]byte("old-dev")))
		return err == nil && !bytes.Contains(e.Value(), []byte(legacyToken)) && bytes.Contains(e.Value(), []byte(`"digest"`))
	})
	expect(t, post("old-dev", legacyToken), 200, "Message processed and data stored successfully", "")
	if r := s.admin(t, http.MethodPost, "/devices/old-dev/tokens/token-1/reveal", ""); r.Status != 200 || r.Body["token"] != legacyToken {
		t.Fatalf("reveal of the upgraded token: %d %s", r.Status, r.Raw)
	}

	// A new device: its generated token is shown once, then by name only.
	r := s.admin(t, http.MethodPut, "/devices/rot-dev", `{"inputs":[{"name":"t","entity":"tok","entityInput":"t"}]}`)
	first, _ := r.Body["accessToken"].(string)
	if r.Status != 200 || len(first) != 32 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	r = s.admin(t, http.MethodGet, "/devices/rot-dev", "")
	if r.Status != 200 || bytes.Contains(r.Raw, []byte(first)) || !bytes.Contains(r.Raw, []byte(`"tokens":[{"name":"token-1","primary":true`)) {
		t.Fatalf("device overview: %d %s", r.Status, r.Raw)
	}
	// A PUT that changes the mapping keeps the token.
	if r := s.admin(t, http.MethodPut, "/devices/rot-dev", `{"inputs":[{"name":"t","entity":"tok","entityInput":"t"},{"name":"u"}]}`); r.Status != 200 || r.Body["accessToken"] != nil {
		t.Fatalf("update: %d %s", r.Status, r.Raw)
	}
	expect(t, post("rot-dev", first), 200, "Message processed and data stored successfully", "")

	// Rotation: add, both valid, promote, retire the old one.
	r = s.admin(t, http.MethodPost, "/devices/rot-dev/tokens", `{"name":"fw-2"}`)
	second, _ := r.Body["token"].(string)
	if r.Status != 201 || r.Body["name"] != "fw-2" || len(second) != 32 || second == first {
		t.Fatalf("add token: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodPost, "/devices/rot-dev/tokens", `{}`); r.Status != 409 || r.Body["message"] != "Conflict" {
		t.Fatalf("third token: %d %s", r.Status, r.Raw)
	}
	expect(t, post("rot-dev", first), 200, "Message processed and data stored successfully", "")
	expect(t, post("rot-dev", second), 200, "Message processed and data stored successfully", "")
	// A field client: a user JWT as Bearer, the device token in the body.
	expect(t, s.post(t, `{"serial":"rot-dev","accessToken":"`+second+`","data":{"t":2}}`, map[string]string{"Authorization": "Bearer user.jwt.value"}),
		200, "Message processed and data stored successfully", "")
	if r := s.admin(t, http.MethodPost, "/devices/rot-dev/tokens/fw-2/promote", ""); r.Status != 200 || !bytes.Contains(r.Raw, []byte(`"tokens":[{"name":"fw-2","primary":true`)) {
		t.Fatalf("promote: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodDelete, "/devices/rot-dev/tokens/token-1", ""); r.Status != 200 || bytes.Contains(r.Raw, []byte("token-1")) {
		t.Fatalf("retire: %d %s", r.Status, r.Raw)
	}
	expect(t, post("rot-dev", first), 401, "Invalid access token", "Invalid access token for device with serial rot-dev")
	expect(t, post("rot-dev", second), 200, "Message processed and data stored successfully", "")
	if r := s.admin(t, http.MethodDelete, "/devices/rot-dev/tokens/fw-2", ""); r.Status != 409 {
		t.Fatalf("retiring the last token: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodDelete, "/devices/rot-dev/tokens/nope", ""); r.Status != 404 {
		t.Fatalf("retiring an unknown token: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodPost, "/devices/rot-dev/tokens/fw-2/reveal", ""); r.Status != 200 || r.Body["token"] != second {
		t.Fatalf("reveal: %d %s", r.Status, r.Raw)
	}
	// The immediate cut-over: a PUT naming a token makes it the only one.
	const chosen = "chosen-token-for-cutover"
	if r := s.admin(t, http.MethodPut, "/devices/rot-dev", `{"accessToken":"`+chosen+`","inputs":[{"name":"t","entity":"tok","entityInput":"t"}]}`); r.Status != 200 || r.Body["accessToken"] != chosen {
		t.Fatalf("cut-over: %d %s", r.Status, r.Raw)
	}
	expect(t, post("rot-dev", second), 401, "Invalid access token", "Invalid access token for device with serial rot-dev")
	expect(t, post("rot-dev", chosen), 200, "Message processed and data stored successfully", "")

	// The Messages view names the token of each message, newest first
	// (raw messages are kept in batches of their own, within a second).
	var names []string
	eventually(t, 5*time.Second, func() bool {
		r := s.admin(t, http.MethodGet, "/devices/rot-dev/messages?limit=10", "")
		msgs, _ := r.Body["messages"].([]any)
		names = names[:0]
		for _, m := range msgs {
			names = append(names, fmt.Sprint(m.(map[string]any)["token"]))
		}
		return len(names) == 6
	})
	if got := strings.Join(names, ","); got != "token-3,fw-2,fw-2,fw-2,token-1,token-1" {
		t.Fatalf("tokens of the messages: %s", got)
	}

	// No token in the clear: the bucket, every revision, and every log.
	secrets := []string{legacyToken, first, second, chosen}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		hist, err := kv.History(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist {
			for _, sec := range secrets {
				if bytes.Contains(e.Value(), []byte(sec)) {
					t.Fatalf("registry key %s holds a token in the clear: %s", k, e.Value())
				}
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(s.logDir, "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec)) {
				t.Fatalf("%s holds a device token", filepath.Base(f))
			}
		}
	}
	if len(logs) != 3 {
		t.Fatalf("logs of %d programs", len(logs))
	}
}
