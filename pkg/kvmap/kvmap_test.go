package kvmap

import (
	"encoding/base64"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A late delivery of an older revision undoes nothing; a removal at the
// revision of a put wins (the watch's delete after a local write).
func TestRevisionOrder(t *testing.T) {
	m := New[string]()
	m.Put("a", "a@2", 2)
	m.Put("a", "a@1", 1)
	m.Put("a", "again@2", 2)
	if v, ok := m.Lookup("a"); !ok || v != "a@2" || m.Len() != 1 {
		t.Fatalf("after late puts: %q %v, len %d", v, ok, m.Len())
	}
	m.Remove("a", 1)
	if _, ok := m.Lookup("a"); !ok {
		t.Fatal("an older removal took effect")
	}
	m.Remove("a", 2)
	m.Put("a", "a@1", 1)
	if _, ok := m.Lookup("a"); ok || m.Len() != 0 {
		t.Fatalf("removed at 2, then an older put: len %d", m.Len())
	}
	m.Put("b", "b@3", 3)
	m.Put("a", "a@4", 4)
	n := 0
	m.Range(func(string, string) bool { n++; return true })
	if n != 2 || m.Len() != 2 || m.LastChange().IsZero() || m.IsSynced() {
		t.Fatalf("range %d, len %d, synced %v", n, m.Len(), m.IsSynced())
	}
}

// entry is a KV entry as the watch delivers it.
type entry struct {
	jetstream.KeyValueEntry
	key string
	val string
	rev uint64
	op  jetstream.KeyValueOp
}

func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return []byte(e.val) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// One name has one key: a key that decodes to a name only loosely (base64
// with stray low bits: "QR" reads as "A" as "QQ" does) is not that name's,
// so a record under it can neither stand for the name nor, deleted, remove
// the name's own record.
func TestOneNameOneKey(t *testing.T) {
	for _, name := range []string{"A", "AA:BB:CC", "a/b c", "dev.1", "*", ">", "ünï", "x\x00y"} {
		raw, err := base64.RawURLEncoding.Strict().DecodeString(Key(name))
		if err != nil || string(raw) != name {
			t.Errorf("Key(%q) = %q decodes to %q, %v", name, Key(name), raw, err)
		}
	}
	m := New[string]()
	var bad []string
	r := Reader[string]{
		Decode: func(name string, value []byte, _ uint64) (string, bool) { return string(value), true },
		BadKey: func(key string) { bad = append(bad, key) },
	}
	m.apply(entry{key: Key("A"), val: "the device", rev: 1, op: jetstream.KeyValuePut}, r)
	m.apply(entry{key: "QR", val: "a stranger", rev: 2, op: jetstream.KeyValuePut}, r)
	m.apply(entry{key: "QR", rev: 3, op: jetstream.KeyValueDelete}, r)
	if v, ok := m.Lookup("A"); !ok || v != "the device" {
		t.Fatalf(`"A" after a put and a delete under "QR": %q %v`, v, ok)
	}
	if len(bad) != 2 || bad[0] != "QR" || bad[1] != "QR" {
		t.Fatalf("bad keys reported: %q", bad)
	}
}
