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
}

// bodyOverhead is what a message adds to its data in a request body.
const bodyOverhead = len(`{"ts":"2006-01-02T15:04:05.000Z","data":},`)

// peek returns the batch to send: the one already named in the state, as
// it was (after a restart too), else a new one of at most maxN readings
// and about maxBytes of body, named in the state before it is returned.
// Only synced readings are sent. An empty batch means nothing is queued.
func (q *Queue) peek(maxN, maxBytes int, now time.Time) (batch, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.trim(now); err != nil {
		return batch{}, err
	}
	b := batch{first: q.st.head}
	want, exact := maxN, q.st.batchFirst == q.st.head && q.st.batchCount > 0
	if exact {
		want = int(q.st.batchCount)
	}
	i, off, seq, size := q.headSegment(), int64(q.st.offset), q.st.head, 0
	for i >= 0 && i < len(q.segs) && len(b.readings) < want && seq <= q.durable {
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
			return batch{}, err
		}
		pos := 0
		for len(b.readings) < want && seq <= q.durable {
			p, n, ok := recordAt(buf[pos:], seq)
			if !ok {
				if pos == 0 {
					return batch{}, errCorrupt
				}
				break // the next window
			}
			r, ok := decodePayload(seq, p)
			if !ok {
				return batch{}, errCorrupt
			}
			if !exact && len(b.readings) > 0 && size+len(r.data)+bodyOverhead > maxBytes {
				want = len(b.readings)
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
	if len(b.readings) == 0 {
		return b, nil
	}
	b.count = uint32(len(b.readings))
	if exact {
		b.count = q.st.batchCount
		return b, nil
	}
	st := q.st
	st.batchFirst, st.batchCount = b.first, b.count
	return b, q.writeState(st)
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
	if err := q.writeState(st); err != nil {
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
