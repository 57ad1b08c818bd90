package devicesdk

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// FullPolicy says what a full queue does with a new reading.
type FullPolicy int

const (
	// DropOldest drops the oldest segment that is not being sent, and
	// counts its readings as dropped.
	DropOldest FullPolicy = iota
	// RefuseNewest refuses the new reading: Record returns ErrFull.
	RefuseNewest
)

// ErrFull is returned by Record when the queue is full and its policy is
// RefuseNewest (or nothing can be dropped).
var ErrFull = errors.New("devicesdk: queue full")

// QueueOptions bound a queue on disk. Zero values take the defaults.
type QueueOptions struct {
	MaxBytes     int64         // all segments together; default 64 MiB
	MaxAge       time.Duration // a closed segment older than this is dropped; 0: no bound
	Full         FullPolicy    // default DropOldest
	SegmentBytes int64         // a segment is closed past this size; default 4 MiB
}

func (o QueueOptions) withDefaults() QueueOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = 4 << 20
	}
	o.SegmentBytes = min(o.SegmentBytes, o.MaxBytes/2)
	return o
}

// Queue is a durable queue of readings in a directory (docs/sdk.md, "Queue
// format"). It is safe for concurrent use; one process opens a directory.
type Queue struct {
	dir  string
	opts QueueOptions
	id   [16]byte

	mu      sync.Mutex
	synced  *sync.Cond // signalled when a sync ends
	syncing bool
	st      state     // as last written
	segs    []segment // oldest first; the last is appended to
	f       *os.File  // the last segment, once opened for appending
	lock    *os.File  // meta, holding the queue's lock until Close
	next    uint64    // the next reading's sequence number
	durable uint64    // readings up to this one are synced
	bytes   int64     // all segments
	drops   drops
	buf     []byte
}

// segment is a segment file: its first reading, size and newest write.
type segment struct {
	first, last uint64 // last < first: empty
	size        int64
	mod         time.Time
	torn        bool // its tail was cut at open
}

func (s segment) name() string { return fmt.Sprintf("%020d.seg", s.first) }

// drops counts readings that left the queue without being sent.
type drops struct {
	full, age, refused uint64
	torn, corrupt      uint64 // cut at open; found damaged when read to send
	tornBytes          int64
}

// ErrBusy: another process (or another Queue in this one) has the queue open.
var ErrBusy = errors.New("devicesdk: the queue is open in another process")

// OpenQueue opens (or makes) the queue in dir, cutting any torn tail. A queue
// is open in one place at a time: a second open gets ErrBusy until Close.
func OpenQueue(dir string, opts QueueOptions) (*Queue, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	q := &Queue{dir: dir, opts: opts.withDefaults()}
	q.synced = sync.NewCond(&q.mu)
	if err := q.loadMeta(); err != nil {
		return nil, err
	}
	lock, err := lockQueue(dir)
	if err != nil {
		return nil, err
	}
	q.lock = lock
	if err := q.load(); err != nil {
		lock.Close()
		return nil, err
	}
	return q, nil
}

func (q *Queue) loadMeta() error {
	path := filepath.Join(q.dir, "meta")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var m meta
		if _, err := rand.Read(m.id[:]); err != nil {
			return err
		}
		q.id = m.id
		return replaceFile(q.dir, "meta", m.encode())
	}
	if err != nil {
		return err
	}
	m, err := decodeMeta(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	q.id = m.id
	return nil
}

// Record writes r and returns once it is on disk.
func (q *Queue) record(rs []reading) (first uint64, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.buf = q.buf[:0]
	first = q.next
	for i := range rs {
		size := int64(headerSize + payloadHead + len(rs[i].data))
		if err := q.room(size + int64(len(q.buf))); err != nil {
			q.drops.refused += uint64(len(rs))
			return 0, err
		}
		q.buf = appendRecord(q.buf, q.next+uint64(i), appendPayload(nil, rs[i]))
	}
	if err := q.append(q.buf, uint64(len(rs))); err != nil {
		return 0, err
	}
	return first, q.syncTo(q.next - 1)
}

// append writes records of n readings to the last segment; on a failure
// the segment is cut back to where it was.
func (q *Queue) append(b []byte, n uint64) error {
	if q.f == nil {
		if err := q.openLast(); err != nil {
			return err
		}
	}
	last := &q.segs[len(q.segs)-1]
	if _, err := q.f.Write(b); err != nil {
		_ = q.f.Truncate(last.size)
		_, _ = q.f.Seek(last.size, 0)
		return err
	}
	last.size += int64(len(b))
	last.last = q.next + n - 1
	last.mod = time.Now()
	q.bytes += int64(len(b))
	q.next += n
	return nil
}

// syncTo returns once reading seq is synced; concurrent callers share
// one sync. q.mu is held.
func (q *Queue) syncTo(seq uint64) error {
	for q.durable < seq {
		if q.syncing {
			q.synced.Wait()
			continue
		}
		q.syncing = true
		f, upto := q.f, q.next-1
		q.mu.Unlock()
		err := f.Sync()
		q.mu.Lock()
		q.syncing = false
		q.synced.Broadcast()
		if err != nil {
			return err
		}
		q.durable = max(q.durable, upto)
	}
	return nil
}

// replaceFile writes name in dir atomically: a temporary file, synced,
// renamed over it, the directory synced.
func replaceFile(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
