package kvmap

import "testing"

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
