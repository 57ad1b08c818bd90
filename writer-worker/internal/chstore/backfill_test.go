package chstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A backfill reads raw messages after a cursor, in receive order, each once,
// and no more payload bytes than it may hold.
func TestRawMessagesAfterACursorBoundedByBytes(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	base := time.Now().Truncate(time.Second).UnixNano()
	var rows []MessageRow
	for i := range 6 {
		size := 10
		if i == 3 || i == 4 {
			size = 3 << 19 // 1.5 MiB
		}
		payload := `{"serial":"raw","data":{"x":"` + strings.Repeat("a", size) + `"}}`
		// m1 and m2 share a receive time; m5 is logged twice (a redelivery).
		ts := base + int64(i)*1e6
		if i == 2 {
			ts = base + 1e6
		}
		rows = append(rows, MessageRow{Serial: "raw", TsNs: ts, EventID: fmt.Sprint("m", i), Payload: []byte(payload), Outcome: "ok", ReadingNs: ts - 7})
	}
	rows = append(rows, rows[5], MessageRow{Serial: "other", TsNs: base, EventID: "o", Payload: []byte("{}")})
	if err := s.InsertMessages(ctx, rows); err != nil {
		t.Fatal(err)
	}
	read := func(afterNs int64, afterID string, toNs int64, limit int, maxBytes int64) string {
		t.Helper()
		msgs, more, err := s.RawMessages(ctx, "raw", afterNs, afterID, toNs, limit, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range msgs {
			if m.ReadingNs != m.TsNs-7 || !strings.HasPrefix(string(m.Payload), `{"serial":"raw"`) {
				t.Fatalf("%s: %+v", m.EventID, m)
			}
			ids = append(ids, m.EventID)
		}
		return fmt.Sprint(ids, more)
	}
	end := base + int64(time.Second)
	for _, c := range []struct {
		afterNs  int64
		afterID  string
		toNs     int64
		limit    int
		maxBytes int64
		want     string
	}{
		{base, "", end, 100, 8 << 20, "[m0 m1 m2 m3 m4 m5] false"},
		{base, "m0", end, 100, 8 << 20, "[m1 m2 m3 m4 m5] false"},
		{base + 1e6, "m1", end, 100, 8 << 20, "[m2 m3 m4 m5] false"},
		{base, "", base + 3e6, 100, 8 << 20, "[m0 m1 m2] false"}, // toNs excluded
		{base, "", end, 2, 8 << 20, "[m0 m1] true"},
		{base, "", end, 6, 8 << 20, "[m0 m1 m2 m3 m4 m5] false"},
		{base, "", end, 5, 8 << 20, "[m0 m1 m2 m3 m4] true"},
		{base, "", end, 100, 2 << 20, "[m0 m1 m2 m3] true"}, // m4 would pass 2 MiB
		{base + 3e6, "m3", end, 100, 1 << 20, "[m4] true"},  // one at least
		{base + 5e6, "m5", end, 100, 1 << 20, "[] false"},
	} {
		if got := read(c.afterNs, c.afterID, c.toNs, c.limit, c.maxBytes); got != c.want {
			t.Errorf("after (%d, %q) before %d, %d messages, %d bytes: %s, want %s", c.afterNs-base, c.afterID, c.toNs-base, c.limit, c.maxBytes, got, c.want)
		}
	}
}
