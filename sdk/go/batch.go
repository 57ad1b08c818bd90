package devicesdk

import (
	"os"
	"path/filepath"
	"time"
)

// batch is readings from the head, being sent together.
type batch struct {
	first    uint64 // the first reading: the head
	count    uint32 // as named by its key (a resent batch may hold fewer)
	readings []reading
	endSeg   uint64 // the first reading of the segment the batch ends in
	endOff   int64  // where it ends in that segment
	held     bool   // empty because the head's reading waits for the clock
}

// bodyOverhead is what a message adds to its data in a request body.
const bodyOverhead = len(`{"ts":"2006-01-02T15:04:05.000Z","data":},`)

// peek returns the batch to send: the one already named in the state, as
// it was (after a restart too), else a new one of at most maxN readings
// and about maxBytes of body, ending before the first reading hold says
// must wait, named in the state before it is returned. Only synced
// readings are sent. An empty batch means nothing can be sent now. A record
// found damaged is cut with what follows it in its segment (counted), as a
// torn tail is at open.
func (q *Queue) peek(maxN, maxBytes int, now time.Time, hold func(reading) bool) (batch, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.trim(now); err != nil {
		return batch{}, err
	}
	for range 3 {
		b, cut, err := q.read(maxN, maxBytes, hold)
		if err != nil || !cut {
			return b, err
		}
	}
	return batch{}, errCorrupt
}

// read is peek's reading; cut says it cut a damaged record (read again).
// q.mu is held.
func (q *Queue) read(maxN, maxBytes int, hold func(reading) bool) (b batch, cut bool, err error) {
	b = batch{first: q.st.head}
	want, exact := maxN, q.st.batchFirst == q.st.head && q.st.batchCount > 0
	end := q.durable + 1 // the first reading not to send
	if exact {
		want, end = int(q.st.batchCount), min(end, q.st.batchFirst+uint64(q.st.batchCount))
	}
	i, off, seq, size := q.headSegment(), int64(q.st.offset), q.st.head, 0
	for i >= 0 && i < len(q.segs) && len(b.readings) < want && seq < end {
		s := q.segs[i]
		if off >= s.size || seq > s.last {
			if i++; i < len(q.segs) {
				off, seq = 0, max(seq, q.segs[i].first)
			}
			continue
		}
		window := min(s.size-off, int64(maxBytes)+MaxRecordBytes+headerSize)
		buf, err := readAt(filepath.Join(q.dir, s.name()), off, window)
		if err != nil {
			return b, false, err
		}
		pos := 0
		for len(b.readings) < want && seq < end {
			p, n, ok := recordAt(buf[pos:], seq)
			r, ok2 := decodePayload(seq, p)
			if !ok && pos > 0 {
				break // the next window
			}
			if !ok || !ok2 {
				return batch{}, true, q.cut(i, off+int64(pos), seq)
			}
			if !exact && (hold(r) || len(b.readings) > 0 && size+len(r.data)+bodyOverhead > maxBytes) {
				want, b.held = len(b.readings), len(b.readings) == 0
				break
			}
			size += len(r.data) + bodyOverhead
			b.readings = append(b.readings, r)
			pos += n
			seq++
			b.endSeg, b.endOff = s.first, off+int64(pos)
		}
		off += int64(pos)
	}
	switch {
	case exact && len(b.readings) == 0:
		// Every reading of the named batch is gone (cut or dropped): the
		// head moves past the batch, and its numbers are not sent again.
		st := q.st
		st.head, st.batchFirst, st.batchCount = q.st.batchFirst+uint64(q.st.batchCount), 0, 0
		return batch{}, true, q.writeState(q.normalized(st))
	case len(b.readings) == 0:
		return b, false, nil
	case exact:
		b.count = q.st.batchCount
		return b, false, nil
	}
	b.count = uint32(len(b.readings))
	st := q.st
	st.batchFirst, st.batchCount = b.first, b.count
	return b, false, q.writeState(st)
}

// cut truncates segment i at off, where the record of reading seq is
// damaged, counting the readings lost. q.mu is held.
func (q *Queue) cut(i int, off int64, seq uint64) error {
	s := &q.segs[i]
	if i == len(q.segs)-1 && q.f != nil {
		// The next reading starts a new segment, not a gap in this one.
		if err := q.f.Close(); err != nil {
			return err
		}
		q.f = nil
	}
	if err := os.Truncate(filepath.Join(q.dir, s.name()), off); err != nil {
		return err
	}
	if s.last >= seq {
		q.drops.corrupt += s.last - seq + 1
	}
	q.bytes -= s.size - off
	s.size, s.last = off, seq-1
	q.st = q.normalized(q.st)
	return nil
}

// split names the first half of b as the batch to send instead (the
// service stored none of b).
func (q *Queue) split(b batch) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.st
	st.batchFirst, st.batchCount = b.first, max(uint32(len(b.readings))/2, 1)
	return q.writeState(st)
}

// settle moves the head past b: its readings leave the queue.
func (q *Queue) settle(b batch) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := state{head: b.readings[len(b.readings)-1].seq + 1, offset: uint64(b.endOff)}
	for _, s := range q.segs {
		if s.first == st.head {
			st.offset = 0
		}
	}
	if err := q.writeState(q.normalized(st)); err != nil {
		return err
	}
	return q.dropSettled()
}

func readAt(path string, off, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := f.ReadAt(buf, off)
	if int64(m) == n {
		err = nil
	}
	return buf[:m], err
}
