package devicesdk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openQ(t *testing.T, dir string, o QueueOptions) *Queue {
	t.Helper()
	q, err := OpenQueue(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func recordN(t *testing.T, q *Queue, from, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.record([]reading{{kind: timeWall, time: int64(1_700_000_000_000 + from + i), data: []byte(fmt.Sprintf(`{"v":%d}`, from+i))}}); err != nil {
			t.Fatal(err)
		}
	}
}

// values drains q's batches, settling each, and returns the readings' data.
func values(t *testing.T, q *Queue, maxN int) []string {
	t.Helper()
	var out []string
	for {
		b, err := q.peek(maxN, 1<<20, time.Now(), noHold)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.readings) == 0 {
			return out
		}
		for _, r := range b.readings {
			out = append(out, string(r.data))
		}
		if err := q.settle(b); err != nil {
			t.Fatal(err)
		}
	}
}

func want(from, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(`{"v":%d}`, from+i))
	}
	return out
}

func same(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %d readings %.200v\nwant %d %.200v", len(got), got, len(want), want)
	}
}

func TestQueueKeepsReadingsAcrossReopenAndSegments(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, QueueOptions{SegmentBytes: 1000})
	recordN(t, q, 0, 100)
	q.Close()
	q = openQ(t, dir, QueueOptions{SegmentBytes: 1000})
	if segs, _ := filepath.Glob(filepath.Join(dir, "*.seg")); len(segs) < 4 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	got := values(t, q, 7)
	same(t, got, want(0, 100))
	recordN(t, q, 100, 5)
	q.Close()
	q = openQ(t, dir, QueueOptions{SegmentBytes: 1000})
	same(t, values(t, q, 1000), want(100, 5))
	if segs, _ := filepath.Glob(filepath.Join(dir, "*.seg")); len(segs) != 1 {
		t.Fatalf("settled segments kept: %v", segs)
	}
}

// A batch named in the state is sent again as it was after a reopen,
// whatever the batch size is by then.
func TestQueueResendsTheSameBatch(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, QueueOptions{})
	recordN(t, q, 0, 10)
	b, err := q.peek(4, 1<<20, time.Now(), noHold)
	if err != nil || len(b.readings) != 4 || b.first != 1 || b.count != 4 {
		t.Fatalf("batch %+v %v", b, err)
	}
	q.Close()
	q = openQ(t, dir, QueueOptions{})
	b2, err := q.peek(100, 1<<20, time.Now(), noHold)
	if err != nil || len(b2.readings) != 4 || b2.first != 1 || b2.count != 4 {
		t.Fatalf("after reopen %+v %v", b2, err)
	}
	if err := q.split(b2); err != nil {
		t.Fatal(err)
	}
	b3, _ := q.peek(100, 1<<20, time.Now(), noHold)
	if len(b3.readings) != 2 || b3.count != 2 {
		t.Fatalf("split %+v", b3)
	}
	same(t, values(t, q, 100), want(0, 10))
}

// Every cut inside the last record leaves the records before it, and the
// queue goes on from there.
func TestQueueCutsATornTail(t *testing.T) {
	base := t.TempDir()
	src := filepath.Join(base, "src")
	q := openQ(t, src, QueueOptions{})
	recordN(t, q, 0, 3)
	q.Close()
	seg := filepath.Join(src, fmt.Sprintf("%020d.seg", 1))
	full, _ := os.ReadFile(seg)
	last := len(full) - (headerSize + payloadHead + len(`{"v":2}`))
	for cut := last; cut < len(full); cut++ {
		for _, flip := range []bool{false, true} {
			dir := filepath.Join(base, fmt.Sprintf("c%d-%v", cut, flip))
			copyDir(t, src, dir)
			b := append([]byte(nil), full[:cut]...)
			if flip {
				b = append([]byte(nil), full...)
				b[cut] ^= 0x40
			}
			os.WriteFile(filepath.Join(dir, filepath.Base(seg)), b, 0o600)
			q := openQ(t, dir, QueueOptions{})
			if q.drops.tornBytes != int64(len(b)-last) {
				t.Fatalf("cut %d flip %v: torn %d bytes, want %d", cut, flip, q.drops.tornBytes, len(b)-last)
			}
			recordN(t, q, 10, 1)
			same(t, values(t, q, 100), append(want(0, 2), `{"v":10}`))
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	os.MkdirAll(to, 0o700)
	es, _ := os.ReadDir(from)
	for _, e := range es {
		b, _ := os.ReadFile(filepath.Join(from, e.Name()))
		os.WriteFile(filepath.Join(to, e.Name()), b, 0o600)
	}
}

func TestQueueBounds(t *testing.T) {
	rec := int64(headerSize + payloadHead + len(`{"v":10}`)) // two digits, as most of them
	t.Run("drop oldest", func(t *testing.T) {
		q := openQ(t, t.TempDir(), QueueOptions{MaxBytes: 20 * rec, SegmentBytes: 5 * rec})
		recordN(t, q, 0, 30)
		got := values(t, q, 1000)
		if q.drops.full != uint64(30-len(got)) || len(got) < 15 || got[len(got)-1] != `{"v":29}` {
			t.Fatalf("kept %d (%v), dropped %d", len(got), got, q.drops.full)
		}
	})
	t.Run("refuse newest", func(t *testing.T) {
		q := openQ(t, t.TempDir(), QueueOptions{MaxBytes: 20 * rec, SegmentBytes: 5 * rec, Full: RefuseNewest})
		recordN(t, q, 10, 20)
		if _, err := q.record([]reading{{data: []byte(`{"v":20}`)}}); !errors.Is(err, ErrFull) || q.drops.refused != 1 {
			t.Fatalf("err %v, refused %d", err, q.drops.refused)
		}
		same(t, values(t, q, 1000), want(10, 20))
	})
	t.Run("age", func(t *testing.T) {
		q := openQ(t, t.TempDir(), QueueOptions{MaxAge: time.Hour, SegmentBytes: 5 * rec})
		recordN(t, q, 10, 12)
		q.mu.Lock()
		q.segs[0].mod = time.Now().Add(-2 * time.Hour)
		q.mu.Unlock()
		same(t, values(t, q, 1000), want(15, 7))
		if q.drops.age != 5 {
			t.Fatalf("dropped for age %d", q.drops.age)
		}
	})
}

// A queue is open in one place at a time: the second open is refused while
// the first holds the lock on meta, and succeeds once it is closed.
func TestQueueLockedWhileOpen(t *testing.T) {
	dir := t.TempDir()
	q, err := OpenQueue(dir, QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recordN(t, q, 0, 3)
	if q2, err := OpenQueue(dir, QueueOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second open: %v, %v", q2, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, QueueOptions{})
	if got := values(t, q, 10); len(got) != 3 || got[2] != `{"v":2}` {
		t.Fatalf("after reopen: %q", got)
	}
}

func noHold(reading) bool { return false }
