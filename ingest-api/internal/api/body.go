package api

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/devicehub/eventservice/ingest-api/internal/guard"
	"github.com/devicehub/eventservice/pkg/outcome"
)

// What reading a body may cost (docs/guarantees.md, "Hostile input").
const (
	// bodyGrace is the time a body has before BODY_MIN_RATE applies, and
	// the longest it may go without a byte arriving: a stalled upload is
	// cut after about this long, however much of it came before.
	bodyGrace = 2 * time.Second
	// bodyFree is the part of each body not counted against the memory
	// budget, so that a flood of large bodies cannot starve small ones;
	// the connection bounds bound it instead. It is also the largest
	// buffer kept for reuse.
	bodyFree = 16 << 10
	// BodyCopies is what a body costs in memory per byte: itself, the
	// payload parsed out of it and its encoding in a message.
	BodyCopies = 3
	// inflateRatio caps how much a gzip body may inflate per byte sent
	// (JSON telemetry inflates 5-20x; a decompression bomb 1000x).
	inflateRatio = 100
	// gzipCost is the memory of one gzip reader's state.
	gzipCost = 48 << 10
)

var (
	errTooLarge  = errors.New("body too large")
	errBomb      = errors.New("body inflates too much")
	errSlowBody  = errors.New("body arrives too slowly")
	errNoBudget  = errors.New("too many large or compressed request bodies at once, retry later")
	errEncoding  = errors.New("unsupported content encoding")
	gzipReaders  sync.Pool
	bodyBuffers  = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
	bodyOutcomes = map[error]outcome.Code{
		errTooLarge: outcome.PayloadTooLarge, errBomb: outcome.PayloadTooLarge, errSlowBody: outcome.BodyTimeout,
		errNoBudget: outcome.Overloaded, errEncoding: outcome.InvalidFormat,
	}
)

// body is a request body read within the front door's bounds. release
// gives its memory back (and its work slot, if it still holds one); the
// bytes must not be used after it.
type body struct {
	b      []byte
	buf    *[]byte // the pooled buffer b came from, if it did
	held   int64
	budget *guard.Budget
	work   func() // gives the work slot back; nil when none is held
}

func (b *body) release() {
	b.endWork()
	if b.budget != nil && b.held > 0 {
		b.budget.Give(b.held)
		b.held = 0
	}
	b.recycle()
}

// recycle returns b's buffer to the pool when it is small.
func (b *body) recycle() {
	if b.buf != nil && cap(b.b) <= bodyFree {
		*b.buf = b.b[:0]
		bodyBuffers.Put(b.buf)
	}
	b.buf, b.b = nil, nil
}

// endWork gives the work slot back.
func (b *body) endWork() {
	if b.work != nil {
		b.work()
		b.work = nil
	}
}

// take reserves n more bytes of the budget for this body.
func (b *body) take(n int64) bool {
	if b.budget == nil {
		return true
	}
	if !b.budget.Take(n) {
		return false
	}
	b.held += n
	return true
}

// readBody reads the request body within every bound: its size, its pace
// (BODY_MIN_RATE after a grace period) and the memory budget. Reading
// waits on the network and holds nothing but the body's memory. A body
// that costs CPU to look at (gzip, or larger than bodyFree) then takes a
// work slot (a few per core, so that a burst of them cannot queue honest
// requests behind it); a gzip body is inflated in it, within its own size
// bound and inflateRatio. The slot is held until endWork, once the body
// was parsed. On an error the outcome says how to answer, and what was
// taken is given back; for a body too large, serial is the serial its
// first bytes name, if they do. The Content-Type is not consulted: devices
// label JSON in many ways.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (b *body, code outcome.Code, serial string, err error) {
	b = &body{budget: s.Budget}
	if err = s.fill(b, w, r); err != nil {
		if err == errTooLarge {
			serial = serialIn(b.b, r.Body)
		}
		b.release()
		code, ok := bodyOutcomes[err]
		if !ok {
			code = outcome.InvalidFormat
		}
		return nil, code, serial, err
	}
	return b, outcome.Stored, "", nil
}

func (s *Server) fill(b *body, w http.ResponseWriter, r *http.Request) error {
	limit := s.Limits.MaxBodyBytes
	if r.ContentLength > limit {
		return errTooLarge
	}
	gz := false
	if enc := strings.TrimSpace(r.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		if !strings.EqualFold(enc, "gzip") {
			return errEncoding
		}
		gz = true
	}
	src := &paced{r: r.Body, rc: http.NewResponseController(w), start: time.Now(), rate: float64(s.Limits.BodyMinRate),
		end: time.Now().Add(s.Limits.BodyTimeout)}
	b.buf = bodyBuffers.Get().(*[]byte)
	b.b = (*b.buf)[:0]
	if err := b.readFrom(src, limit); err != nil {
		return err
	}
	if !gz && len(b.b) <= bodyFree {
		return nil
	}
	done, ok := s.Work.Take(r.Context())
	if !ok {
		return errNoBudget
	}
	b.work = done
	if !gz {
		return nil
	}
	if !b.take(gzipCost) {
		return errNoBudget
	}
	zr, err := newGzip(bytes.NewReader(b.b))
	if err != nil {
		return bodyErr(err)
	}
	defer gzipReaders.Put(zr)
	raw := *b
	b.buf, b.b = bodyBuffers.Get().(*[]byte), nil
	b.b = (*b.buf)[:0]
	err = b.readFrom(&capped{r: zr, max: bodyFree + inflateRatio*int64(len(raw.b))}, limit)
	raw.recycle()
	return err
}

// readFrom appends what r holds to b.b, up to limit bytes, taking budget
// for every byte of capacity beyond bodyFree (times BodyCopies).
func (b *body) readFrom(r io.Reader, limit int64) error {
	for {
		if len(b.b) == cap(b.b) {
			grown := int(min(int64(max(2*cap(b.b), 4096)), limit+1))
			if grown > bodyFree && !b.take(int64(BodyCopies*(grown-max(cap(b.b), bodyFree)))) {
				return errNoBudget
			}
			b.b = append(make([]byte, 0, grown), b.b...)
		}
		n, err := r.Read(b.b[len(b.b):cap(b.b)])
		b.b = b.b[:len(b.b)+n]
		if int64(len(b.b)) > limit {
			return errTooLarge
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bodyErr(err)
		}
	}
}

func newGzip(src io.Reader) (*gzip.Reader, error) {
	if zr, ok := gzipReaders.Get().(*gzip.Reader); ok {
		if err := zr.Reset(src); err != nil {
			gzipReaders.Put(zr)
			return nil, err
		}
		return zr, nil
	}
	return gzip.NewReader(src)
}

// bodyErr names what went wrong reading a body.
func bodyErr(err error) error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return errSlowBody
	}
	return err
}

// paced reads a body no slower than rate bytes a second once bodyGrace
// has passed, never waiting more than bodyGrace for the next bytes, and not
// past end (the server's 15 s read timeout): before each read the connection's read
// deadline is moved to when the bytes asked for are due.
type paced struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	end   time.Time
	rate  float64 // bytes per second; 0: no pacing
	n     int64
}

func (p *paced) Read(b []byte) (int, error) {
	if p.rate > 0 {
		if len(b) > bodyFree {
			b = b[:bodyFree]
		}
		now := time.Now()
		due := p.start.Add(bodyGrace + time.Duration(float64(p.n+int64(len(b)))/p.rate*float64(time.Second)))
		if stall := now.Add(bodyGrace); due.After(stall) {
			due = stall
		}
		if !p.end.IsZero() && due.After(p.end) {
			due = p.end
		}
		// Without deadline support (a test's recorder) the body is read
		// as it comes.
		_ = p.rc.SetReadDeadline(due)
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

// capped stops a gzip body that inflates to more than max bytes.
type capped struct {
	r   io.Reader
	max int64
	n   int64
}

func (c *capped) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.n > c.max {
		return n, errBomb
	}
	return n, err
}

// discardRest reads and drops what is left of a refused body, up to max
// bytes, as nginx's lingering close does: many clients (Python's urllib,
// embedded HTTP stacks) write their whole body before they read, and an
// answer sent while the body still arrives, followed by a close, reaches
// them as a broken pipe or a reset instead of the answer. It reports
// whether the body was read to its end; if not, the connection is closed
// after the answer. A read deadline set while reading the body still
// holds, so a slow sender gets no more time.
func discardRest(r *http.Request, max int64) bool {
	n, err := io.CopyN(io.Discard, r.Body, max+1)
	return n <= max && err == io.EOF
}
