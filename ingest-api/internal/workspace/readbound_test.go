package workspace

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

func TestPaceBudget(t *testing.T) {
	b := newPaceBudget(1000, 2000)
	t0 := time.Unix(1000, 0)
	if w := b.wait(t0); w != 0 {
		t.Fatalf("a full budget waits %v", w)
	}
	b.spend(t0, 3000) // 1,000 in debt
	if w := b.wait(t0); w != time.Second {
		t.Errorf("1,000 bytes in debt at 1,000/s: wait %v, want 1s", w)
	}
	if w := b.wait(t0.Add(600 * time.Millisecond)); w != 400*time.Millisecond {
		t.Errorf("after 600ms: wait %v, want 400ms", w)
	}
	if w := b.wait(t0.Add(time.Hour)); w != 0 {
		t.Errorf("after an hour: wait %v", w)
	}
	b.spend(t0.Add(time.Hour), 2000) // refilled to the burst, not beyond
	if w := b.wait(t0.Add(time.Hour)); w != 0 {
		t.Errorf("the burst spent exactly: wait %v, want 0", w)
	}
	b.spend(t0.Add(time.Hour), 500)
	if w := b.wait(t0.Add(time.Hour)); w != 500*time.Millisecond {
		t.Errorf("the burst and 500 more: wait %v, want 500ms", w)
	}
}

// A client reading large pages in a loop gets them at the budget's pace:
// the read after one that spent the budget waits for it, and one that would
// wait more than paceWait is answered 503 with Retry-After at once.
func TestLargeReadsArePaced(t *testing.T) {
	s := &Server{reads: make(chan struct{}, 1), readBytes: newPaceBudget(1<<20, 1<<20),
		readTime: newPaceBudget(1000, 1000),
		answers:  edge.NewAnswers(zap.NewNop(), prometheus.NewRegistry())}
	size := 1 << 20
	h := s.boundReads(func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/json", []byte(strings.Repeat("x", size)))
	})
	get := reader(t, h)
	if code, _, took := get(); code != 200 || took > 300*time.Millisecond {
		t.Fatalf("first read: %d after %v, want 200 at once", code, took)
	}
	// 1 MiB spent of a 1 MiB budget: the next waits until it is repaid
	// (it is at 0, so it passes), then puts it 1 MiB in debt.
	if code, _, _ := get(); code != 200 {
		t.Fatalf("second read: %d", code)
	}
	size = 1 << 19
	code, _, took := get()
	if code != 200 || took < 700*time.Millisecond {
		t.Fatalf("a read 1 MiB in debt at 1 MiB/s: %d after %v, want 200 after ~1s", code, took)
	}
	// Now 0.5 MiB in debt: waits ~0.5s.
	size = 4 << 20
	if code, _, took := get(); code != 200 || took < 300*time.Millisecond {
		t.Fatalf("a read 0.5 MiB in debt: %d after %v, want 200 after ~0.5s", code, took)
	}
	size = 8 << 20
	if code, _, took := get(); code != 200 || took > 4500*time.Millisecond || took < 3*time.Second {
		t.Fatalf("a read 4 MiB in debt: %d after %v, want 200 after ~4s", code, took)
	}
	// 8 MiB in debt: a wait of ~8s is over paceWait.
	code, retry, took := get()
	if secs, _ := strconv.Atoi(retry); code != outcome.Lookup(outcome.Overloaded).Status || secs < 7 || took > 300*time.Millisecond {
		t.Fatalf("a read 8 MiB in debt: %d Retry-After %q after %v, want 503 with Retry-After >= 7 at once", code, retry, took)
	}
	// Writes are not paced.
	rec := httptest.NewRecorder()
	if err := h(echo.New().NewContext(httptest.NewRequest(http.MethodPut, "/x", nil), rec)); err != nil || rec.Code != 200 {
		t.Fatalf("a write while reads are in debt: %d %v", rec.Code, err)
	}
}

// Reads that take long are paced by their time, whatever their size: the
// read after one that spent the time budget waits until it is repaid, and
// one that would wait more than paceWait is answered 503 at once.
func TestSlowReadsArePacedByTheirTime(t *testing.T) {
	s := &Server{reads: make(chan struct{}, 1), readBytes: newPaceBudget(1<<30, 1<<30), readTime: newPaceBudget(0.5, 0.1),
		answers: edge.NewAnswers(zap.NewNop(), prometheus.NewRegistry())}
	took := 300 * time.Millisecond
	h := s.boundReads(func(c echo.Context) error {
		time.Sleep(took)
		return c.Blob(http.StatusOK, "application/json", []byte("{}"))
	})
	get := reader(t, h)
	if code, _, d := get(); code != 200 || d > took+300*time.Millisecond {
		t.Fatalf("first read: %d after %v, want 200 after its own %v", code, d, took)
	}
	// 0.2 s in debt at 0.5 s/s: the next waits ~0.4 s before its own
	// 2.8 s.
	took = 2800 * time.Millisecond
	if code, _, d := get(); code != 200 || d < took+150*time.Millisecond {
		t.Fatalf("a read after one that spent the time: %d after %v, want 200 after ~%v", code, d, took+400*time.Millisecond)
	}
	// Now ~2.7 s in debt: a wait of ~5.4 s is over paceWait.
	code, retry, d := get()
	if secs, _ := strconv.Atoi(retry); code != outcome.Lookup(outcome.Overloaded).Status || secs < 5 || d > 300*time.Millisecond {
		t.Fatalf("a read 2.8 s in debt: %d Retry-After %q after %v, want 503 with Retry-After >= 5 at once", code, retry, d)
	}
}

// reader GETs through h: the status, the Retry-After and the time taken.
func reader(t *testing.T, h echo.HandlerFunc) func() (int, string, time.Duration) {
	e := echo.New()
	return func() (int, string, time.Duration) {
		rec := httptest.NewRecorder()
		start := time.Now()
		if err := h(e.NewContext(httptest.NewRequest(http.MethodGet, "/x", nil), rec)); err != nil {
			t.Fatal(err)
		}
		return rec.Code, rec.Header().Get("Retry-After"), time.Since(start)
	}
}
