package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testKey is a TOKEN_KEY for tests.
const testKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func keyring(t testing.TB, key, previous string) *Keyring {
	t.Helper()
	k, err := NewKeyring(key, previous)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNormalize(t *testing.T) {
	d := Device{Serial: "s", Inputs: []Input{{Name: "t", Entity: "e"}, {Name: "v"}}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	if d.ConnectionType != ConnectionAPI || d.AccessToken != "" || d.Inputs[0].EntityInput != "t" {
		t.Fatalf("defaults not filled: %+v", d)
	}
	for name, bad := range map[string]Device{
		"empty serial":     {},
		"long serial":      {Serial: strings.Repeat("x", MaxSerialLen+1)},
		"control char":     {Serial: "a\nb"},
		"bad type":         {Serial: "s", ConnectionType: "api"},
		"duplicate input":  {Serial: "s", Inputs: []Input{{Name: "a"}, {Name: "a"}}},
		"unnamed input":    {Serial: "s", Inputs: []Input{{Entity: "e"}}},
		"orphan entityInp": {Serial: "s", Inputs: []Input{{Name: "a", EntityInput: "x"}}},
		"long token":       {Serial: "s", AccessToken: strings.Repeat("t", MaxTokenLen+1)},
	} {
		if err := bad.Normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// device returns a device with one token, secret, made under k.
func device(t testing.TB, k *Keyring, serial, secret string) Device {
	t.Helper()
	d := Device{Serial: serial, ConnectionType: ConnectionAPI, Inputs: []Input{{Name: "t", Entity: "e", EntityInput: "i"}}}
	if _, err := d.AddToken(k, "", secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCacheRevisions(t *testing.T) {
	k := keyring(t, testKey, "")
	c := NewCache()
	d := device(t, k, "s", "tok")
	c.Put(d, 5)
	old := device(t, k, "s", "old")
	c.Put(old, 4) // a late watch delivery of an older revision
	e, ok := c.Lookup("s")
	if _, match := e.Authenticate(k, "old"); !ok || match || e.Rev != 5 {
		t.Fatalf("older revision overwrote newer: %+v", e)
	}
	if name, match := e.Authenticate(k, "tok"); !match || name != "token-1" {
		t.Fatalf("token not recognised: %q %v", name, match)
	}
	if r, ok := e.Route("t"); !ok || r != (Route{"e", "i"}) {
		t.Fatalf("route = %+v %v", r, ok)
	}
	for _, bad := range [][]string{{""}, {"tok "}, {"TOK"}, {}, {"", "to"}} {
		if _, match := e.Authenticate(k, bad...); match {
			t.Fatalf("token comparison too lax: %q", bad)
		}
	}
	if _, match := e.Authenticate(keyring(t, strings.Repeat("x", 40), ""), "tok"); match {
		t.Fatal("a token matched under another key")
	}
	c.Remove("s", 5)
	if _, ok := c.Lookup("s"); ok || c.Len() != 0 {
		t.Fatal("remove did not apply")
	}
	c.Put(d, 5) // the watch replaying the put that preceded the delete
	if _, ok := c.Lookup("s"); ok {
		t.Fatal("a replayed put resurrected a deleted device")
	}
	c.Put(d, 6)
	if _, ok := c.Lookup("s"); !ok || c.Len() != 1 {
		t.Fatal("a newer put after delete did not apply")
	}
}

func open(t *testing.T, url string) (*Store, func()) {
	t.Helper()
	js := testenv.OperatorJS(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, js, BucketConfig{Bucket: "reg_test", Replicas: 1}, NewCache(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Cache().Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	return s, func() { cancel(); <-done }
}

func TestStoreSpreadsChangesToEveryCopy(t *testing.T) {
	ns := testenv.NATS(t)
	a, stopA := open(t, ns.ClientURL())
	defer stopA()
	ctx := context.Background()
	k := keyring(t, testKey, "")
	d := device(t, k, "weird serial/with.dots*", "tok-1")
	if _, err := a.Update(ctx, d.Serial, func(rec *Device, exists bool) error { *rec = d; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Cache().Lookup(d.Serial); !ok {
		t.Fatal("the writing instance must serve the change before Update returns")
	}
	// A copy started later loads it as initial state...
	b, stopB := open(t, ns.ClientURL())
	defer stopB()
	if e, ok := b.Cache().Lookup(d.Serial); !ok || !matches(k, e, "tok-1") {
		t.Fatal("initial load missed the device")
	}
	// ...and follows later changes within a second.
	if _, err := a.Update(ctx, d.Serial, func(rec *Device, exists bool) error {
		_, err := rec.SetToken(k, "tok-2", time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		e, ok := b.Cache().Lookup(d.Serial)
		return ok && matches(k, e, "tok-2") && !matches(k, e, "tok-1")
	})
	if got, err := b.Get(ctx, d.Serial); err != nil || len(got.Tokens) != 1 || got.Tokens[0].Name != "token-2" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if got, err := a.Delete(ctx, d.Serial); err != nil || got.Serial != d.Serial {
		t.Fatal(got, err)
	}
	waitFor(t, func() bool { _, ok := b.Cache().Lookup(d.Serial); return !ok })
	if _, err := a.Delete(ctx, d.Serial); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := a.Get(ctx, d.Serial); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func matches(k *Keyring, e *Entry, secret string) bool {
	_, ok := e.Authenticate(k, secret)
	return ok
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("change not seen within 1s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCacheListings(t *testing.T) {
	c := NewCache()
	for i, serial := range []string{"b-2", "a-1", "b-1", "b-3", "c-1", "gone"} {
		c.Put(Device{Serial: serial, ConnectionType: ConnectionAPI, Inputs: []Input{
			{Name: "t", Entity: "boiler", EntityInput: "temp"}, {Name: "x"},
		}}, uint64(i+1))
	}
	c.Remove("gone", 10)
	serials := func(ds []Device) (out []string) {
		for _, d := range ds {
			out = append(out, d.Serial)
		}
		return out
	}
	page, more := c.Devices("b-", "", 2)
	if got := serials(page); !slices.Equal(got, []string{"b-1", "b-2"}) || !more {
		t.Fatalf("first page %v more %v", got, more)
	}
	page, more = c.Devices("b-", "b-2", 2)
	if got := serials(page); !slices.Equal(got, []string{"b-3"}) || more {
		t.Fatalf("second page %v more %v", got, more)
	}
	page, _ = c.Devices("", "", 100)
	if got := serials(page); !slices.Equal(got, []string{"a-1", "b-1", "b-2", "b-3", "c-1"}) {
		t.Fatalf("all %v", got)
	}
	ei := c.EntityInputs()
	feeds := ei["boiler"]["temp"]
	if len(ei) != 1 || len(ei["boiler"]) != 1 || len(feeds) != 5 {
		t.Fatalf("entity inputs %v", ei)
	}
	for _, f := range feeds {
		if f.DeviceInput != "t" || f.Serial == "gone" {
			t.Fatalf("feed %+v", f)
		}
	}
}
