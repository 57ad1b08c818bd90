package devicesdk

import (
	"errors"
	"fmt"
	"io"
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
	hi := q.headSegment()
	for i := range q.segs {
		if i > 0 && q.segs[i].first <= q.segs[i-1].last {
			return fmt.Errorf("%s: overlaps the segment before it: %w", q.segs[i].name(), errCorrupt)
		}
		if i < hi { // settled: removed below, not read
			q.segs[i].last = q.segs[i+1].first - 1
			continue
		}
		if err := q.scan(&q.segs[i], i == hi); err != nil {
			return err
		}
	}
	q.st = q.normalized(q.st)
	q.next = q.st.head
	if n := len(q.segs); n > 0 {
		q.next = max(q.next, q.segs[n-1].last+1)
	}
	if q.st.head > q.next {
		q.st = state{head: q.next}
	}
	// Never reuse a number of the batch named in the state: if its readings
	// were lost with the disk's cache, new readings must not go out under
	// its key.
	if q.st.batchCount > 0 {
		q.next = max(q.next, q.st.batchFirst+uint64(q.st.batchCount))
	}
	// Readings a killed process wrote but had not synced are in the page
	// cache; each segment was synced by scan before its records are trusted.
	if err := syncDir(q.dir); err != nil {
		return err
	}
	q.durable = q.next - 1
	for i := 0; i+1 < len(q.segs); i++ {
		if q.segs[i].torn {
			q.drops.torn += q.segs[i+1].first - q.segs[i].last - 1
		}
	}
	if n := len(q.segs); n > 0 && q.segs[n-1].torn {
		q.drops.torn++ // at least one reading was being written
	}
	return q.dropSettled()
}

// normalized moves a head that is past its segment's last reading (the
// readings after it were cut or dropped) to the next segment's first, and
// sets its offset; a head before every segment goes to the first.
func (q *Queue) normalized(st state) state {
	switch i := q.segmentOf(st.head); {
	case i < 0 && len(q.segs) > 0:
		st.head, st.offset = q.segs[0].first, 0
	case i >= 0 && st.head > q.segs[i].last && i+1 < len(q.segs):
		st.head, st.offset = q.segs[i+1].first, 0
	case i >= 0 && st.head > q.segs[i].last:
		st.offset = uint64(q.segs[i].size)
	}
	return st
}

// scan checks a segment's records, truncating it after the last good one
// (a torn tail), and finds the head's offset in it. In the head's segment
// it starts at the head (what is before it is settled), so that damage to
// settled readings cuts nothing unsettled. It syncs the file: records a
// killed process wrote are in the page cache, not yet on disk.
func (q *Queue) scan(s *segment, atHead bool) error {
	path := filepath.Join(q.dir, s.name())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	off, seq := 0, s.first
	if h := q.st.head; atHead && h > s.first && q.st.offset <= uint64(len(b)) {
		if _, _, ok := recordAt(b[q.st.offset:], h); ok || q.st.offset == uint64(len(b)) {
			off, seq, s.last = int(q.st.offset), h, h-1
		}
	}
	for ; ; seq++ {
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
		s.torn = true
		q.drops.tornBytes += int64(len(b) - off)
		if err := f.Truncate(int64(off)); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	s.size, s.mod = int64(off), fi.ModTime()
	q.bytes += s.size
	return nil
}

// headSegment is the index of the segment the head is in, or -1.
func (q *Queue) headSegment() int { return q.segmentOf(q.st.head) }

// segmentOf is the index of the last segment whose first reading is not
// after seq, or -1.
func (q *Queue) segmentOf(seq uint64) int {
	return sort.Search(len(q.segs), func(i int) bool { return q.segs[i].first > seq }) - 1
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
