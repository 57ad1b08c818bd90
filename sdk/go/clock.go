package devicesdk

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockPolicy says what to do with a reading recorded while the device's
// clock is not set (before Config.ClockEpoch).
type ClockPolicy int

const (
	// FixLater records the time since boot and sends the reading with its
	// wall time once the clock is set in the same boot (waiting at most
	// Config.ClockWait); otherwise it is sent without a time.
	FixLater ClockPolicy = iota
	// SendWithoutTime records no time: the service stores the reading at
	// its receive time.
	SendWithoutTime
)

// bootClock tells the boot and the time since it (Linux: /proc); elsewhere
// the process stands for the boot.
type bootClock struct {
	id      [16]byte
	started time.Time
}

func newBootClock() bootClock {
	var c bootClock
	c.started = time.Now()
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")); err == nil && len(id) == 16 {
			copy(c.id[:], id)
			return c
		}
	}
	_, _ = rand.Read(c.id[:])
	return c
}

// sinceBoot is the time since boot, in milliseconds.
func (c bootClock) sinceBoot() int64 {
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if s, err := strconv.ParseFloat(f[0], 64); err == nil {
				return int64(s * 1000)
			}
		}
	}
	return time.Since(c.started).Milliseconds()
}
