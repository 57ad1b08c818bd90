package testenv

import (
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut are the ports FreePort returned in this process: a port handed
// out but not yet bound by its server is free to a second look, and two
// programs of one stack were once given the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback port that is free now, was not returned
// before in this process, and lies below the kernel's ephemeral range, so
// that no outgoing connection (the load of a concurrent test opens
// thousands) can take it before the server binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	lo := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				lo = v
			}
		}
	}
	const base = 10000
	for range 100 {
		p := base + mathrand.IntN(lo-base)
		handedOut.Lock()
		taken := handedOut.ports[p]
		handedOut.ports[p] = true
		handedOut.Unlock()
		if taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatal("no free loopback port below the ephemeral range in 100 tries")
	return 0
}
