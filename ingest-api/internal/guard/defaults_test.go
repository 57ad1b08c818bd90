package guard

import "testing"

// The memory-derived defaults: an eighth of the container's memory for
// bodies, a sixteenth at 20 KiB a connection, each within its bounds, and
// the old fixed values when the memory is unknown.
func TestDefaultsFollowTheContainersMemory(t *testing.T) {
	for _, c := range []struct {
		memory int64
		body   int64
		conns  int
	}{
		{0, 64 << 20, 4096},
		{256 << 20, 64 << 20, 4096},
		{2 << 30, 256 << 20, 6553},
		{16 << 30, 1 << 30, 52428},
		{64 << 30, 1 << 30, 65536},
	} {
		if b, n := defaultBodyMemory(c.memory), defaultMaxConns(c.memory); b != c.body || n != c.conns {
			t.Errorf("memory %d: bodies %d, connections %d; want %d, %d", c.memory, b, n, c.body, c.conns)
		}
	}
}
