package devicesdk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// load reads the state and scans every segment, cutting each at its first
// record that is not whole, intact and next in sequence.
func (q *Queue) load() error {
	q.st = state{head: 1}
	b, err := os.ReadFile(filepath.Join(q.dir, "state"))
	switch {
	case err == nil:
		if st, derr := decodeState(b); derr == nil {
			q.st = st
		} else {
			q.st.head = 0 // from the oldest segment
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	paths, err := filepath.Glob(filepath.Join(q.dir, "*.seg"))
	if err != nil {
		return err
	}
	for _, p := range paths {
		first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), ".seg"), 10, 64)
		if err != nil || first == 0 {
			return fmt.Errorf("%s: not a segment name", p)
		}
		q.segs = append(q.segs, segment{first: first, last: first - 1})
	}
	sort.Slice(q.segs, func(i, j int) bool { return q.segs[i].first < q.segs[j].first })
	if q.st.head == 0 {
		q.st = state{head: 1}
		if len(q.segs) > 0 {
			q.st.head = q.segs[0].first
		}
	}
	for i := range q.segs {
		if i > 0 && q.segs[i].first <= q.segs[i-1].last {
			return fmt.Errorf("%s: overlaps the segment before it: %w", q.segs[i].name(), errCorrupt)
		}
		if err := q.scan(&q.segs[i]); err != nil {
			return err
		}
	}
	// A head in a gap between segments (their readings were cut) moves
	// to the next segment's first reading.
	switch i := q.headSegment(); {
	case i < 0 && len(q.segs) > 0:
		q.st.head, q.st.offset = q.segs[0].first, 0
	case i >= 0 && q.st.head > q.segs[i].last+1 && i+1 < len(q.segs):
		q.st.head, q.st.offset = q.segs[i+1].first, 0
	case i >= 0 && q.st.head > q.segs[i].last+1:
		q.st.offset = uint64(q.segs[i].size)
	}
	q.next = q.st.head
	if n := len(q.segs); n > 0 {
		q.next = max(q.next, q.segs[n-1].last+1)
	}
	if q.st.head > q.next {
		q.st = state{head: q.next}
	}
	q.durable = q.next - 1
	return q.dropSettled()
}

// scan checks a segment's records, truncating it after the last good one
// (a torn tail), and finds the head's offset in it.
func (q *Queue) scan(s *segment) error {
	path := filepath.Join(q.dir, s.name())
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	off := 0
	for seq := s.first; ; seq++ {
		if seq == q.st.head {
			q.st.offset = uint64(off)
		}
		_, n, ok := recordAt(b[off:], seq)
		if !ok {
			break
		}
		off += n
		s.last = seq
	}
	if off < len(b) {
		q.drops.tornBytes += int64(len(b) - off)
		if err := os.Truncate(path, int64(off)); err != nil {
			return err
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	s.size, s.mod = int64(off), fi.ModTime()
	q.bytes += s.size
	return nil
}

// headSegment is the index of the segment the head is in (the last whose
// first reading is not after it), or -1.
func (q *Queue) headSegment() int {
	i := sort.Search(len(q.segs), func(i int) bool { return q.segs[i].first > q.st.head }) - 1
	return i
}

// dropSettled removes the segments wholly before the head's (never the last).
func (q *Queue) dropSettled() error {
	for len(q.segs) > 1 && q.segs[0].last < q.st.head {
		if err := q.remove(0); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) remove(i int) error {
	if err := os.Remove(filepath.Join(q.dir, q.segs[i].name())); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	q.bytes -= q.segs[i].size
	q.segs = append(q.segs[:i], q.segs[i+1:]...)
	return nil
}

// openLast opens the last segment for appending, or starts a new one when
// there is none or the last is full.
func (q *Queue) openLast() error {
	if n := len(q.segs); n > 0 && q.segs[n-1].size < q.opts.SegmentBytes && q.segs[n-1].last+1 == q.next {
		f, err := os.OpenFile(filepath.Join(q.dir, q.segs[n-1].name()), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		q.f = f
		return nil
	}
	s := segment{first: q.next, last: q.next - 1, mod: time.Now()}
	f, err := os.OpenFile(filepath.Join(q.dir, s.name()), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(q.dir); err != nil {
		f.Close()
		return err
	}
	q.f = f
	q.segs = append(q.segs, s)
	return nil
}

// roll closes the last segment once it is full; the next write starts a
// new one. q.mu is held.
func (q *Queue) roll() error {
	for q.syncing {
		q.synced.Wait()
	}
	if q.f == nil || q.segs[len(q.segs)-1].size < q.opts.SegmentBytes {
		return nil
	}
	err := q.f.Sync()
	if cerr := q.f.Close(); err == nil {
		err = cerr
	}
	q.f = nil
	if err == nil {
		q.durable = q.next - 1
	}
	return err
}

// room makes room for size more bytes, as the policy says. q.mu is held.
func (q *Queue) room(size int64) error {
	if err := q.roll(); err != nil {
		return err
	}
	for q.bytes+size > q.opts.MaxBytes {
		if q.opts.Full == RefuseNewest || !q.droppable(0) {
			return ErrFull
		}
		if err := q.drop(0, &q.drops.full); err != nil {
			return err
		}
	}
	return nil
}

// droppable reports whether segment i may be dropped: closed, and holding
// no reading of the batch being sent.
func (q *Queue) droppable(i int) bool {
	if i >= len(q.segs)-1 {
		return false
	}
	s := q.segs[i]
	return q.st.batchFirst == 0 || s.last < q.st.batchFirst || s.first >= q.st.batchFirst+uint64(q.st.batchCount)
}

// drop removes segment i, counting its unsettled readings under n.
func (q *Queue) drop(i int, n *uint64) error {
	s := q.segs[i]
	if s.last >= q.st.head {
		*n += s.last + 1 - max(s.first, q.st.head)
	}
	if q.st.head <= s.last {
		st := q.st
		st.head, st.offset = q.segs[i+1].first, 0
		if err := q.writeState(st); err != nil {
			return err
		}
	}
	return q.remove(i)
}

// trim drops closed segments older than MaxAge. q.mu is held.
func (q *Queue) trim(now time.Time) error {
	if q.opts.MaxAge <= 0 {
		return nil
	}
	for len(q.segs) > 1 && now.Sub(q.segs[0].mod) > q.opts.MaxAge && q.droppable(0) {
		if err := q.drop(0, &q.drops.age); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) writeState(st state) error {
	if err := replaceFile(q.dir, "state", st.encode()); err != nil {
		return err
	}
	q.st = st
	return nil
}

// Close syncs and closes the queue.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.syncing {
		q.synced.Wait()
	}
	var err error
	if q.f != nil {
		err = q.f.Sync()
		if cerr := q.f.Close(); err == nil {
			err = cerr
		}
		q.f = nil
	}
	if q.lock != nil {
		q.lock.Close() // releases the flock
		q.lock = nil
	}
	return err
}
