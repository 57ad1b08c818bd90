package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/devicehub/eventservice/pkg/query"
)

// Reads are bounded by bytes: a series of large values (more than one NATS
// message holds) is answered in pages of at most ~4 MiB that say they are
// cut and where the next starts, which together hold every value once;
// the aggregated series and the entity list leave out last values over
// their share, naming their size.
func TestLargeValuesAreReadInBoundedPages(t *testing.T) {
	s := startStack(t)
	if r := s.admin(t, http.MethodPut, "/devices/big-1", `{"accessToken":"tok-5f0c2b9e71d4-big-1","inputs":[{"name":"blob","entity":"bulk","entityInput":"blob"}]}`); r.Status != http.StatusOK {
		t.Fatalf("PUT big-1: %d %s", r.Status, r.Raw)
	}
	// 15 readings of 600 KB, a second apart: 9 MB, over the 8 MB a NATS
	// message holds here (as deploy/nats/nats.conf).
	const n, size = 15, 600 << 10
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range n {
		body := fmt.Sprintf(`{"serial":"big-1","ts":%d,"data":{"blob":"%02d%s"}}`, start.Add(time.Duration(i)*time.Second).UnixMilli(), i, strings.Repeat("x", size-2))
		if r := s.post(t, body, bearer("tok-5f0c2b9e71d4-big-1")); r.Status != http.StatusOK {
			t.Fatalf("post %d: %d %s", i, r.Status, r.Raw)
		}
	}
	q := url.Values{"from": {start.Add(-time.Second).Format(time.RFC3339Nano)}, "to": {time.Now().Format(time.RFC3339Nano)}}
	var got []string
	pages := 0
	for {
		r := s.admin(t, http.MethodGet, "/entities/bulk/inputs/blob/series?"+q.Encode(), "")
		var page struct {
			Points []struct {
				TS    string
				Value string
			}
			Truncated bool
			Next      string
		}
		if err := json.Unmarshal(r.Raw, &page); r.Status != http.StatusOK || err != nil {
			t.Fatalf("series page %d: %d %.300s", pages, r.Status, r.Raw)
		}
		if len(r.Raw) > query.MaxBytes+64<<10 {
			t.Errorf("page %d of %d bytes, want at most ~%d", pages, len(r.Raw), query.MaxBytes)
		}
		pages++
		for _, p := range page.Points {
			got = append(got, p.Value[:2])
		}
		if page.Truncated != (page.Next != "") {
			t.Fatalf("page %d: truncated %v, next %q", pages, page.Truncated, page.Next)
		}
		if page.Next == "" || pages > n {
			break
		}
		q.Set("from", page.Next)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("%02d", i))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || pages < 3 {
		t.Errorf("%d pages held %v, want every value once, in %d or more pages", pages, got, 3)
	}

	// One bucket a second: their last values share the answer's bytes.
	q = url.Values{"from": {start.Format(time.RFC3339Nano)}, "to": {start.Add(n * time.Second).Format(time.RFC3339Nano)}, "step": {"1s"}}
	r := s.admin(t, http.MethodGet, "/entities/bulk/inputs/blob/series?"+q.Encode(), "")
	if r.Status != http.StatusOK || len(r.Raw) > query.MaxBytes+64<<10 || r.Body["truncated"] != true ||
		!strings.Contains(string(r.Raw), fmt.Sprintf(`"last":null,"lastBytes":%d`, size+2)) {
		t.Errorf("buckets: %d, %d bytes, want cut last values: %.300s", r.Status, len(r.Raw), r.Raw)
	}
	// The latest value alone fits.
	if r := s.admin(t, http.MethodGet, "/entities/bulk/inputs/blob/latest", ""); r.Status != http.StatusOK || r.Body["truncated"] != nil ||
		!strings.HasPrefix(fmt.Sprint(r.Body["value"]), "14x") {
		t.Errorf("latest: %d %.200s", r.Status, r.Raw)
	}
}
