package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/kvmap"
)

const otherKey = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

func TestKeyring(t *testing.T) {
	if _, err := NewKeyring(strings.Repeat("k", MinKeyLen-1), ""); err == nil {
		t.Fatal("a short key was accepted")
	}
	k, other := keyring(t, testKey, ""), keyring(t, otherKey, "")
	if k.Digest("tok") != keyring(t, testKey, "").Digest("tok") || k.Digest("tok") == other.Digest("tok") || k.Digest("tok") == k.Digest("tok2") {
		t.Fatal("digests must depend on the key and the token, and only on them")
	}
	if k.ID() == other.ID() || len(k.ID()) != 12 || strings.Contains(testKey, k.ID()) {
		t.Fatalf("key ids %q %q", k.ID(), other.ID())
	}
	sealed, err := k.Seal("dev-1", "token-1", "secret-token")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("secret-token")) {
		t.Fatal("sealed token holds the token")
	}
	again, _ := k.Seal("dev-1", "token-1", "secret-token")
	if bytes.Equal(sealed, again) {
		t.Fatal("sealing twice gave the same bytes: the nonce repeats")
	}
	if got, err := k.Open(k.ID(), "dev-1", "token-1", sealed); err != nil || got != "secret-token" {
		t.Fatalf("open = %q, %v", got, err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() (string, error){
		"other serial": func() (string, error) { return k.Open(k.ID(), "dev-2", "token-1", sealed) },
		"other name":   func() (string, error) { return k.Open(k.ID(), "dev-1", "token-2", sealed) },
		"tampered":     func() (string, error) { return k.Open(k.ID(), "dev-1", "token-1", tampered) },
		"other key":    func() (string, error) { return other.Open(k.ID(), "dev-1", "token-1", sealed) },
		"short":        func() (string, error) { return k.Open(k.ID(), "dev-1", "token-1", sealed[:5]) },
	} {
		if got, err := open(); !errors.Is(err, ErrKey) || got != "" {
			t.Errorf("%s: opened %q, %v", name, got, err)
		}
	}
	// The key that replaces it still opens what it made.
	next := keyring(t, otherKey, testKey)
	if got, err := next.Open(k.ID(), "dev-1", "token-1", sealed); err != nil || got != "secret-token" {
		t.Fatalf("previous key: %q, %v", got, err)
	}
}

func TestTokenRotation(t *testing.T) {
	k := keyring(t, testKey, "")
	d := Device{Serial: "rot"}
	first, err := d.AddToken(k, "", "", time.Now())
	if err != nil || len(first) != 32 {
		t.Fatalf("generated token %q, %v", first, err)
	}
	second, err := d.AddToken(k, "fw-2", "", time.Now())
	if err != nil || second == first {
		t.Fatalf("second token %q, %v", second, err)
	}
	if _, err := d.AddToken(k, "", "", time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("third token: %v", err)
	}
	e := NewEntry(d, 1)
	for secret, want := range map[string]string{first: "token-1", second: "fw-2"} {
		if name, ok := e.Authenticate(k, "wrong", secret); !ok || name != want {
			t.Fatalf("%s: authenticated as %q %v", want, name, ok)
		}
	}
	if v := d.View(); len(v.Tokens) != 2 || !v.Tokens[0].Primary || v.Tokens[1].Primary || v.Tokens[1].Name != "fw-2" {
		t.Fatalf("view %+v", v)
	}
	if b, _ := json.Marshal(d.View()); bytes.Contains(b, []byte(first)) || bytes.Contains(b, []byte("digest")) || bytes.Contains(b, []byte("sealed")) {
		t.Fatalf("the view shows what it must not: %s", b)
	}
	if b, _ := json.Marshal(d); bytes.Contains(b, []byte(first)) || bytes.Contains(b, []byte(second)) {
		t.Fatalf("the record holds a token: %s", b)
	}
	if err := d.Promote("fw-2"); err != nil || d.Tokens[0].Name != "fw-2" {
		t.Fatalf("promote: %v %+v", err, d.Tokens)
	}
	if err := d.Retire("token-1"); err != nil || len(d.Tokens) != 1 {
		t.Fatalf("retire: %v", err)
	}
	if err := d.Retire("fw-2"); !errors.Is(err, ErrConflict) {
		t.Fatalf("retiring the last token: %v", err)
	}
	for _, err := range []error{d.Promote("nope"), d.Retire("nope")} {
		if !errors.Is(err, ErrNoToken) {
			t.Fatalf("unknown name: %v", err)
		}
	}
	if _, ok := NewEntry(d, 2).Authenticate(k, first); ok {
		t.Fatal("a retired token still authenticates")
	}
	if got, err := d.Reveal(k, "fw-2"); err != nil || got != second {
		t.Fatalf("reveal = %q, %v", got, err)
	}
	// Names are never reused, and neither is a token the device holds.
	third, err := d.AddToken(k, "", "chosen-token", time.Now())
	if err != nil || third != "chosen-token" || d.Tokens[1].Name != "token-3" {
		t.Fatalf("added %q, %v, %+v", third, err, d.Tokens)
	}
	d2 := Device{Serial: "rot2"}
	_, _ = d2.AddToken(k, "", "same", time.Now())
	if _, err := d2.AddToken(k, "", "same", time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("the same token twice: %v", err)
	}
	if _, err := d2.AddToken(k, "token-1", "", time.Now()); !errors.Is(err, ErrConflict) {
		t.Fatalf("a name twice: %v", err)
	}
	// SetToken: the immediate cut-over.
	if set, err := d2.SetToken(k, "same", time.Now()); err != nil || set {
		t.Fatalf("setting the token it has: %v %v", set, err)
	}
	if set, err := d2.SetToken(k, "fresh", time.Now()); err != nil || !set || len(d2.Tokens) != 1 || d2.Tokens[0].Name != "token-2" {
		t.Fatalf("cut-over: %v %v %+v", set, err, d2.Tokens)
	}
}

// legacyRecord is a record as the code before token digests wrote it.
const legacyRecord = `{"serial":"%s","connectionType":"API","accessToken":"%s","inputs":[{"name":"t","entity":"e","entityInput":"t"}]}`

func TestUpgradeRewritesLegacyAndPreviousKeyRecords(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.OperatorJS(t, ns.ClientURL())
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "reg_test", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := kv.Put(ctx, kvmap.Key(fmt.Sprintf("legacy-%d", i)), fmt.Appendf(nil, legacyRecord, fmt.Sprintf("legacy-%d", i), fmt.Sprintf("plain-token-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	old := keyring(t, otherKey, "")
	prev := device(t, old, "under-old-key", "old-key-token")
	b, _ := json.Marshal(prev)
	if _, err := kv.Put(ctx, kvmap.Key(prev.Serial), b); err != nil {
		t.Fatal(err)
	}

	s, stop := open(t, ns.ClientURL())
	defer stop()
	k := keyring(t, testKey, otherKey)
	// Before the upgrade, every record authenticates already.
	for serial, secret := range map[string]string{"legacy-1": "plain-token-1", "under-old-key": "old-key-token"} {
		if e, ok := s.Cache().Lookup(serial); !ok || !matches(k, e, secret) {
			t.Fatalf("%s does not authenticate before the upgrade", serial)
		}
	}
	if e, _ := s.Cache().Lookup("legacy-1"); e.Device.AccessToken != "" {
		t.Fatal("the cache keeps a token in the clear")
	}
	n, failed, err := s.Upgrade(ctx, k)
	if n != 4 || failed != 0 || err != nil {
		t.Fatalf("upgraded %d, failed %d, %v", n, failed, err)
	}
	if n, _, _ := s.Upgrade(ctx, k); n != 0 {
		t.Fatalf("a second upgrade rewrote %d records", n)
	}
	// The bucket holds no token in the clear, in any revision.
	keys, _ := kv.ListKeys(ctx)
	for name := range keys.Keys() {
		hist, err := kv.History(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist {
			if bytes.Contains(e.Value(), []byte("plain-token")) || bytes.Contains(e.Value(), []byte("old-key-token")) {
				t.Fatalf("%s holds a token: %s", name, e.Value())
			}
		}
	}
	// A keyring without the previous key now serves every record.
	current := keyring(t, testKey, "")
	for serial, secret := range map[string]string{"legacy-0": "plain-token-0", "legacy-2": "plain-token-2", "under-old-key": "old-key-token"} {
		d, err := s.Get(ctx, serial)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := d.Reveal(current, d.Tokens[0].Name); err != nil || got != secret {
			t.Fatalf("%s: reveal %q, %v", serial, got, err)
		}
		if e, _ := s.Cache().Lookup(serial); !matches(current, e, secret) {
			t.Fatalf("%s does not authenticate after the upgrade", serial)
		}
	}
	if d, _ := s.Get(ctx, "legacy-0"); d.AccessToken != "" || d.Tokens[0].Name != "token-1" || d.TokenSeq != 1 || len(d.Inputs) != 1 {
		t.Fatalf("upgraded record %+v", d)
	}
}

func TestUpdateLosesNoConcurrentChange(t *testing.T) {
	ns := testenv.NATS(t)
	a, stopA := open(t, ns.ClientURL())
	defer stopA()
	b, stopB := open(t, ns.ClientURL())
	defer stopB()
	ctx := context.Background()
	const writers = 8
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := []*Store{a, b}[i%2]
			_, err := s.Update(ctx, "cas", func(d *Device, exists bool) error {
				d.ConnectionType = ConnectionAPI
				d.Inputs = append(d.Inputs, Input{Name: fmt.Sprintf("in-%d", i)})
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	d, err := a.Get(ctx, "cas")
	if err != nil || len(d.Inputs) != writers {
		t.Fatalf("%d of %d changes kept (%v)", len(d.Inputs), writers, err)
	}
	if _, err := a.Update(ctx, "cas", func(d *Device, exists bool) error { d.AccessToken = "clear"; return nil }); err == nil {
		t.Fatal("a token in the clear was stored")
	}
}
