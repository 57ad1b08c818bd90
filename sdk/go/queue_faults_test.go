package devicesdk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A full queue drops the oldest segments that do not hold the batch being
// sent: during an outage the device keeps recording (review: only the first
// segment was ever dropped, so a batch in flight made Record refuse).
func TestQueueDropsAroundTheBatchInFlight(t *testing.T) {
	rec := int64(headerSize + payloadHead + len(`{"v":10}`))
	q := openQ(t, t.TempDir(), QueueOptions{MaxBytes: 20 * rec, SegmentBytes: 5 * rec})
	recordN(t, q, 10, 5)
	b, err := q.peek(3, 1<<20, time.Now(), noHold) // named, in the first segment
	if err != nil || len(b.readings) != 3 {
		t.Fatal(len(b.readings), err)
	}
	recordN(t, q, 15, 40)
	if q.drops.full == 0 || q.drops.refused != 0 {
		t.Fatalf("dropped %d, refused %d", q.drops.full, q.drops.refused)
	}
	got := values(t, q, 3)
	same(t, got[:5], want(10, 5)) // the batch and the rest of its segment
	if got[len(got)-1] != `{"v":54}` || uint64(len(got))+q.drops.full != 45 {
		t.Fatalf("kept %v, dropped %d", got, q.drops.full)
	}
}

// The numbers of a named batch are never given to new readings: if the
// batch's readings are lost (a kill, then a power cut before they reached
// the disk), new readings must not go out under the batch's key.
func TestQueueNeverReusesANamedBatchsNumbers(t *testing.T) {
	dir := t.TempDir()
	q, err := OpenQueue(dir, QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recordN(t, q, 0, 2)
	b, _ := q.peek(10, 1<<20, time.Now(), noHold)
	if b.first != 1 || b.count != 2 {
		t.Fatalf("batch %d+%d", b.first, b.count)
	}
	q.Close()
	seg := filepath.Join(dir, segment{first: 1}.name())
	if err := os.Truncate(seg, 0); err != nil { // both readings lost
		t.Fatal(err)
	}
	q = openQ(t, dir, QueueOptions{})
	recordN(t, q, 7, 2)
	b, err = q.peek(10, 1<<20, time.Now(), noHold)
	if err != nil || b.first < 3 || len(b.readings) != 2 || string(b.readings[0].data) != `{"v":7}` {
		t.Fatalf("after the loss: batch %d+%d %v, %v", b.first, b.count, b.readings, err)
	}
}

// Damage in the settled part of the head's segment cuts nothing unsettled:
// the scan starts at the head.
func TestQueueScansFromTheHead(t *testing.T) {
	dir := t.TempDir()
	q, err := OpenQueue(dir, QueueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recordN(t, q, 0, 6)
	b, _ := q.peek(3, 1<<20, time.Now(), noHold)
	if err := q.settle(b); err != nil {
		t.Fatal(err)
	}
	q.Close()
	seg := filepath.Join(dir, segment{first: 1}.name())
	data, _ := os.ReadFile(seg)
	data[headerSize+payloadHead+2] ^= 0xff // inside the first, settled reading
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, QueueOptions{})
	same(t, values(t, q, 10), want(3, 3))
}

// A batch that ends a segment, followed by a gap (a segment dropped or cut
// after it), does not stall the queue: the head goes on at the next
// segment (review: peek came back empty until a restart).
func TestQueueGoesOnAfterAGap(t *testing.T) {
	rec := int64(headerSize + payloadHead + len(`{"v":10}`))
	q := openQ(t, t.TempDir(), QueueOptions{SegmentBytes: 3 * rec})
	recordN(t, q, 10, 9) // three segments of three
	q.mu.Lock()
	err := q.remove(1)
	q.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	same(t, values(t, q, 3), []string{`{"v":10}`, `{"v":11}`, `{"v":12}`, `{"v":16}`, `{"v":17}`, `{"v":18}`})
}

// A record damaged after the queue was opened is cut when it is read to
// send, with the rest of its segment, and counted; later segments go on.
func TestQueueCutsWhatIsDamagedWhenRead(t *testing.T) {
	rec := int64(headerSize + payloadHead + len(`{"v":10}`))
	dir := t.TempDir()
	q := openQ(t, dir, QueueOptions{SegmentBytes: 4 * rec})
	recordN(t, q, 10, 8)
	seg := filepath.Join(dir, segment{first: 1}.name())
	data, _ := os.ReadFile(seg)
	data[2*rec+headerSize+payloadHead+2] ^= 0xff // reading 3 of the first segment
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	same(t, values(t, q, 10), []string{`{"v":10}`, `{"v":11}`, `{"v":14}`, `{"v":15}`, `{"v":16}`, `{"v":17}`})
	if q.drops.corrupt != 2 {
		t.Fatalf("cut %d, want 2", q.drops.corrupt)
	}
}
