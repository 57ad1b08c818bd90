package devicesdk

import "time"

// room makes room for size more bytes, as the policy says: DropOldest drops
// the oldest closed segments that hold no reading of the batch being sent.
// q.mu is held.
func (q *Queue) room(size int64) error {
	if err := q.roll(); err != nil {
		return err
	}
	for q.bytes+size > q.opts.MaxBytes {
		i := q.droppable(0)
		if q.opts.Full == RefuseNewest || i < 0 {
			return ErrFull
		}
		if err := q.drop(i, &q.drops.full); err != nil {
			return err
		}
	}
	return nil
}

// droppable is the first segment from i on that may be dropped (closed, and
// holding no reading of the batch being sent), or -1.
func (q *Queue) droppable(i int) int {
	for ; i < len(q.segs)-1; i++ {
		s := q.segs[i]
		if q.st.batchCount == 0 || s.last < q.st.batchFirst || s.first >= q.st.batchFirst+uint64(q.st.batchCount) {
			return i
		}
	}
	return -1
}

// drop removes segment i, counting its unsettled readings under n; a head
// in it moves to the next segment's first reading.
func (q *Queue) drop(i int, n *uint64) error {
	s := q.segs[i]
	if s.last >= q.st.head {
		*n += s.last + 1 - max(s.first, q.st.head)
	}
	if q.st.head >= s.first && q.st.head <= s.last {
		st := q.st
		st.head, st.offset = q.segs[i+1].first, 0
		if err := q.writeState(st); err != nil {
			return err
		}
	}
	return q.remove(i)
}

// trim drops closed segments whose newest reading is older than MaxAge,
// but not one holding the batch being sent. q.mu is held.
func (q *Queue) trim(now time.Time) error {
	if q.opts.MaxAge <= 0 {
		return nil
	}
	for i := q.droppable(0); i >= 0 && now.Sub(q.segs[i].mod) > q.opts.MaxAge; i = q.droppable(i) {
		if err := q.drop(i, &q.drops.age); err != nil {
			return err
		}
	}
	return nil
}
