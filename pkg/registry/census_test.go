package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
	"github.com/devicehub/eventservice/pkg/kvmap"
)

func TestCommonKey(t *testing.T) {
	for _, c := range []struct {
		name string
		mine []string
		sets [][]string
		want string
	}{
		{"alone on new,old", []string{"new", "old"}, [][]string{{"new", "old"}}, "new"},
		{"beside a copy on old", []string{"new", "old"}, [][]string{{"new", "old"}, {"old"}}, "old"},
		{"beside a copy on new", []string{"new", "old"}, [][]string{{"new", "old"}, {"new"}}, "new"},
		{"a copy on old only", []string{"old"}, [][]string{{"old"}, {"new", "old"}}, "old"},
		{"nothing in common", []string{"new"}, [][]string{{"new"}, {"old"}}, ""},
		{"a copy whose keys cannot be told", []string{"new", "old"}, [][]string{{"new", "old"}, nil}, ""},
	} {
		got, ok := common(c.mine, c.sets)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: common = %q %v, want %q", c.name, got, ok, c.want)
		}
	}
}

func TestKeyringWritesUnderTheKeyChosen(t *testing.T) {
	k := keyring(t, otherKey, testKey) // rotating from testKey to otherKey
	oldID, newID := keyring(t, testKey, "").ID(), keyring(t, otherKey, "").ID()
	if k.ID() != newID || len(k.IDs()) != 2 || k.IDs()[1] != oldID {
		t.Fatalf("ring writes under %s, reads %v", k.ID(), k.IDs())
	}
	if k.WriteUnder("000000000000") || k.ID() != newID {
		t.Fatal("WriteUnder took a key the ring does not hold")
	}
	if !k.WriteUnder(oldID) {
		t.Fatal("WriteUnder refused the previous key")
	}
	d := device(t, k, "dev", "tok")
	if d.Tokens[0].Key != oldID {
		t.Fatalf("token made under %s, want the previous key %s", d.Tokens[0].Key, oldID)
	}
	old := keyring(t, testKey, "")
	if e := NewEntry(d, 1); !matches(old, e, "tok") || e.Unreadable(old) {
		t.Fatal("a copy on the previous key alone cannot read a token made while the ring wrote under it")
	}
	if got, err := d.Reveal(old, "token-1"); err != nil || got != "tok" {
		t.Fatalf("reveal on the previous key: %q %v", got, err)
	}
	onlyNew := keyring(t, otherKey, "")
	if e := NewEntry(d, 1); matches(onlyNew, e, "tok") || !e.Unreadable(onlyNew) || e.Unreadable(k) {
		t.Fatal("Unreadable does not tell a token under a key the ring lacks")
	}
	if e := NewEntry(Device{Serial: "legacy", AccessToken: "clear"}, 1); e.Unreadable(onlyNew) || !matches(onlyNew, e, "clear") {
		t.Fatal("a record from before token digests must read on any ring")
	}
}

// copyOf is one ingest-api copy as the census sees it: its keys and its
// census, running until stop.
type copyOf struct {
	keys   *Keyring
	census *Census
	stop   func()
}

func startCopy(t *testing.T, js jetstream.JetStream, key, previous string) *copyOf {
	t.Helper()
	k := keyring(t, key, previous)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := OpenCensus(ctx, js, "census_test", 1, k, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("census not ready within 10s")
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return &copyOf{keys: k, census: c, stop: stop}
}

// keysOf returns the keys of serial's tokens in the bucket ("" for a
// token in the clear).
func keysOf(t *testing.T, kv jetstream.KeyValue, serial string) []string {
	t.Helper()
	e, err := kv.Get(context.Background(), kvmap.Key(serial))
	if err != nil {
		t.Fatal(err)
	}
	var d Device
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	if d.AccessToken != "" {
		out = append(out, "")
	}
	for _, tk := range d.Tokens {
		out = append(out, tk.Key)
	}
	return out
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A rolling restart from TOKEN_KEY=old to new,old: while a copy on old
// alone is live, the copy on new,old writes and rewrites under old only
// (a record from before token digests included), and the copy on old
// reads every record; once it has gone, the records move to new; a copy
// on old coming back (a rollback) has them moved back.
func TestRotationWaitsForEveryCopy(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.OperatorJS(t, ns.ClientURL())
	ctx := context.Background()
	oldKey, newKey := testKey, otherKey
	oldID, newID := keyring(t, oldKey, "").ID(), keyring(t, newKey, "").ID()

	s, stopStore := open(t, ns.ClientURL())
	defer stopStore()
	kv, err := js.KeyValue(ctx, "reg_test")
	if err != nil {
		t.Fatal(err)
	}
	first := device(t, keyring(t, oldKey, ""), "made-under-old", "tok-old")
	if _, err := s.Update(ctx, first.Serial, func(d *Device, _ bool) error { *d = first; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, kvmap.Key("legacy"), fmt.Appendf(nil, legacyRecord, "legacy", "tok-legacy")); err != nil {
		t.Fatal(err)
	}
	until(t, "the legacy record in the cache", func() bool { _, ok := s.Cache().Lookup("legacy"); return ok })

	a := startCopy(t, js, oldKey, "")
	b := startCopy(t, js, newKey, oldKey)
	until(t, "the copies agree on the old key", func() bool { return b.census.Agreed() && b.keys.ID() == oldID })
	upgrading, stopUpgrading := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.KeepUpgraded(b.keys, b.census)(upgrading) }()
	defer func() { stopUpgrading(); <-done }()

	// The record from before token digests is rewritten under the key
	// both copies read; the one under old stays.
	until(t, "the legacy record under the old key", func() bool { return fmt.Sprint(keysOf(t, kv, "legacy")) == "["+oldID+"]" })
	_, err = s.Update(ctx, first.Serial, func(d *Device, _ bool) error {
		_, err := d.AddToken(b.keys, "fw-2", "tok-added", time.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keysOf(t, kv, first.Serial)); got != fmt.Sprint([]string{oldID, oldID}) {
		t.Fatalf("while a copy reads old only, tokens are under %s", got)
	}
	for _, c := range [][2]string{{"legacy", "tok-legacy"}, {first.Serial, "tok-old"}, {first.Serial, "tok-added"}} {
		e, _ := s.Cache().Lookup(c[0])
		if !matches(a.keys, e, c[1]) || e.Unreadable(a.keys) {
			t.Fatalf("the copy on the old key cannot authenticate %s with %s", c[0], c[1])
		}
	}

	// The copy on old stops: every record moves to new.
	a.stop()
	until(t, "the copy on new,old alone writes under new", func() bool { return b.census.Agreed() && b.keys.ID() == newID })
	underNew := fmt.Sprint([]string{newID, newID})
	until(t, "every record under the new key", func() bool {
		return fmt.Sprint(keysOf(t, kv, first.Serial)) == underNew && fmt.Sprint(keysOf(t, kv, "legacy")) == "["+newID+"]"
	})
	onlyNew := keyring(t, newKey, "")
	for serial, secret := range map[string]string{"legacy": "tok-legacy", first.Serial: "tok-added"} {
		until(t, serial+" authenticates on the new key alone", func() bool {
			e, _ := s.Cache().Lookup(serial)
			return matches(onlyNew, e, secret)
		})
	}

	// A copy on old comes back (a rollback): the records move back.
	startCopy(t, js, oldKey, "")
	until(t, "every record back under the old key", func() bool {
		return fmt.Sprint(keysOf(t, kv, first.Serial)) == fmt.Sprint([]string{oldID, oldID}) && fmt.Sprint(keysOf(t, kv, "legacy")) == "["+oldID+"]"
	})
}

// Copies that hold no key in common do not agree (KeepUpgraded rewrites
// nothing), each writing under its own key, until one is gone.
func TestNoCommonKeyNoAgreement(t *testing.T) {
	ns := testenv.NATS(t)
	js := testenv.OperatorJS(t, ns.ClientURL())
	a := startCopy(t, js, testKey, "")
	b := startCopy(t, js, otherKey, "")
	until(t, "the copies see each other", func() bool { return !a.census.Agreed() && !b.census.Agreed() })
	if a.keys.ID() == b.keys.ID() {
		t.Fatal("copies on different keys write under one")
	}
	b.stop()
	until(t, "a copy alone agrees with itself", func() bool { return a.census.Agreed() })
}

// A copy counts announcements seen within announceTTL, withdrawn ones
// never, and knows nothing while its own is not among them.
func TestLiveCopies(t *testing.T) {
	c := &Census{self: "me"}
	now := time.Now()
	seen := map[string]seenCopy{
		"me":    {keys: []string{"new", "old"}, at: now.Add(-time.Second)},
		"other": {keys: []string{"old"}, at: now.Add(-announceTTL + time.Second)},
		"dead":  {keys: []string{"older"}, at: now.Add(-announceTTL - time.Second)},
		"left":  {keys: []string{"older"}, at: now, gone: true},
	}
	sets := c.live(seen, now)
	if len(sets) != 2 || len(seen) != 2 {
		t.Fatalf("live sets %v, kept %v", sets, seen)
	}
	if id, ok := common([]string{"new", "old"}, sets); !ok || id != "old" {
		t.Fatalf("common %q %v", id, ok)
	}
	if sets := c.live(seen, now.Add(announceTTL)); sets != nil {
		t.Fatalf("own announcement not renewed, yet the census is %v", sets)
	}
}
