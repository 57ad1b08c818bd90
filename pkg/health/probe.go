package health

import (
	"fmt"
	"net/http"
	"time"
)

// ProbeArgs handles `PROGRAM -probe URL`, the container health check on
// images that have no shell or curl: it reports whether args asked for a
// probe, and the probe's result (nil when URL answered 200).
func ProbeArgs(args []string) (bool, error) {
	if len(args) != 2 || args[0] != "-probe" {
		return false, nil
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(args[1])
	if err != nil {
		return true, fmt.Errorf("probe: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return true, fmt.Errorf("probe: %s answered %d", args[1], resp.StatusCode)
	}
	return true, nil
}
