package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// registryWrite is a device record written and answered 200, and when.
type registryWrite struct {
	serial string
	at     time.Time
}

// registryWrites provisions a new device through the admin API every
// 200 ms until ctx ends (the console's writes: the registry is a NATS KV
// bucket, held by NATS alone), and sends on the channel returned the
// writes answered 200.
func registryWrites(ctx context.Context, s *stack) <-chan []registryWrite {
	out := make(chan []registryWrite, 1)
	go func() {
		var ok []registryWrite
		client := &http.Client{Timeout: 5 * time.Second}
		for n := 0; ctx.Err() == nil; n++ {
			serial := fmt.Sprintf("reg-%d", n)
			body := fmt.Sprintf(`{"accessToken":"reg-tok-5f0c2b9e71d4-%d","inputs":[{"name":"v","entity":"reg","entityInput":"v"}]}`, n)
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.ws+"/api/v1/admin/devices/"+serial, strings.NewReader(body))
			if err != nil {
				break
			}
			req.Header.Set("Authorization", "Bearer "+adminToken)
			if resp, err := client.Do(req); err == nil {
				if resp.StatusCode == http.StatusOK {
					ok = append(ok, registryWrite{serial: serial, at: time.Now()})
				}
				_ = resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		out <- ok
	}()
	return out
}

// registryKept fails the test for every device whose write was answered
// 200 but that the registry no longer has, except those written after
// since (not zero: the writes the settings may lose, counted).
func registryKept(t *testing.T, s *stack, name string, written []registryWrite, since time.Time) {
	t.Helper()
	var lost, wrong []string
	for _, w := range written {
		if r := s.admin(t, http.MethodGet, "/devices/"+w.serial, ""); r.Status != http.StatusOK {
			lost = append(lost, fmt.Sprintf("%s (%d)", w.serial, r.Status))
			if since.IsZero() || w.at.Before(since) {
				wrong = append(wrong, w.serial)
			}
		}
	}
	fmt.Printf("registry fault=%s written=%d lost=%d\n", name, len(written), len(lost))
	t.Logf("%s: %d device records written (answered 200) during the load, %d lost: %v", name, len(written), len(lost), lost)
	if len(wrong) > 0 {
		t.Errorf("%s: %d device records answered 200 are gone from the registry: %v", name, len(wrong), wrong)
	}
}
