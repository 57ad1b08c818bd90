package devicesdk

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A reading recorded before the clock was set waits for it and is sent
// with its time fixed up from the time since boot; one from another boot,
// or under SendWithoutTime, goes without a time.
func TestUnsetClock(t *testing.T) {
	unset := time.Date(1970, 1, 1, 0, 5, 0, 0, time.UTC)
	t.Run("fixed once the clock is set", func(t *testing.T) {
		f := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 200, nil, storedAnswer }}
		c, waits, run := client(t, f, Config{}, 100)
		var set atomic.Bool
		c.now = func() time.Time {
			if set.Load() {
				return time.Now()
			}
			return unset
		}
		if err := c.Record(map[string]any{"v": 1}); err != nil {
			t.Fatal(err)
		}
		sleep := c.sleep
		c.sleep = func(ctx context.Context, d time.Duration) bool { set.Store(true); return sleep(ctx, d) }
		run()
		if len(*waits) != 1 || (*waits)[0] != 10*time.Second || len(f.requests()) != 1 {
			t.Fatalf("waits %v, %d requests", *waits, len(f.requests()))
		}
		ts, err := time.Parse(time.RFC3339, f.requests()[0].Messages[0].TS)
		if err != nil || time.Since(ts) > 5*time.Second || time.Since(ts) < 0 || c.Status().NoTime != 0 {
			t.Fatalf("ts %q (%v ago), %v", f.requests()[0].Messages[0].TS, time.Since(ts), err)
		}
	})
	for _, name := range []string{"another boot", "send without time"} {
		t.Run(name, func(t *testing.T) {
			f := &fake{answer: func(fakeReq) (int, map[string]string, string) { return 200, nil, storedAnswer }}
			cfg := Config{}
			if name == "send without time" {
				cfg.UnsetClock = SendWithoutTime
			}
			c, waits, run := client(t, f, cfg, 100)
			c.now = func() time.Time { return unset }
			if err := c.Record(map[string]any{"v": 1}); err != nil {
				t.Fatal(err)
			}
			c.now = time.Now
			c.boot.id[0] ^= 1 // rebooted
			run()
			if len(f.requests()) != 1 || f.requests()[0].Messages[0].TS != "" || len(*waits) != 0 || c.Status().NoTime != 1 {
				t.Fatalf("requests %+v, waits %v, status %+v", f.requests(), *waits, c.Status())
			}
		})
	}
}
