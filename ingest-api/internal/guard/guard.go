// Package guard is ingest-api's front door against strangers: what a client
// address may cost before it has authenticated. It bounds connections per
// address and in all, refuses an address that keeps failing
// authentication, bounds the memory that request bodies hold, and tells
// the client's address from a trusted proxy's.
package guard

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/devicehub/eventservice/pkg/envflag"
)

// Config is the front door's settings.
type Config struct {
	// AuthFailures is how many failed authentications (device or admin)
	// one address may have in AuthWindow before it is refused for the
	// rest of the window.
	AuthFailures int
	// MaxConnsPerSource and MaxConns bound open connections per address
	// and in all.
	MaxConnsPerSource int
	MaxConns          int
	// BodyMemory bounds the bytes the bodies being read or handled hold.
	BodyMemory int64
	// BodyMinRate is the slowest a body may arrive, after a grace period.
	BodyMinRate int64
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies string
}

// AuthWindow is the window of AuthFailures: a minute, so that a device
// whose token was changed under it (and that backs off 5 minutes after a
// 401) is never held out, while a guesser gets 20 tries a minute.
const AuthWindow = time.Minute

// Defaults derived from the memory the process may use (memory: the
// container's limit, 0 when unknown): bodies may hold an eighth of it, and
// connections (about 20 KiB each when idle) a sixteenth.
func defaultBodyMemory(memory int64) int64 { return clamp(memory/8, 64<<20, 1<<30) }
func defaultMaxConns(memory int64) int     { return int(clamp(memory/16/(20<<10), 4096, 65536)) }

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// Register adds the settings; memory is the container's memory limit (0:
// unknown), from which the bounds on bodies and connections default.
func (c *Config) Register(s *envflag.Set, memory int64) {
	s.Int(&c.AuthFailures, "source-auth-failures", 20, "failed authentications (device or admin) one client address may have in a minute; beyond, it is refused with 429 + Retry-After until the minute ends")
	s.Int(&c.MaxConnsPerSource, "source-max-conns", 512, "open connections one client address may hold; beyond, a new one is answered 429 and closed (a NAT shares an address among many devices)")
	s.Int(&c.MaxConns, "max-conns", defaultMaxConns(memory), "open connections in all (default: a sixteenth of the container's memory at 20 KiB each, 4096 to 65536); at the bound, the one longest without a request handled (idle, or still sending headers) is closed to make room, and only when all are handling requests is a new one answered 503 and closed")
	s.Int64(&c.BodyMemory, "max-body-memory", defaultBodyMemory(memory), "bytes (default: an eighth of the container's memory, 64 MiB to 1 GiB) all request bodies being read or handled may hold, with their copies and gzip state; 503 + Retry-After beyond (the first 16 KiB of each body are not counted: see docs/guarantees.md)")
	s.Int64(&c.BodyMinRate, "body-min-rate", 16<<10, "slowest a request body may arrive, in bytes per second, after a 2 s grace: a stalled upload is answered 408 and closed")
	s.String(&c.TrustedProxies, "trusted-proxies", "", "comma-separated addresses or CIDR ranges of proxies whose X-Forwarded-For names the client (empty: the peer is the client)")
}

// Validate checks the settings.
func (c *Config) Validate() error {
	switch {
	case c.AuthFailures < 1:
		return errors.New("SOURCE_AUTH_FAILURES must be at least 1")
	case c.MaxConnsPerSource < 1 || c.MaxConns < c.MaxConnsPerSource:
		return errors.New("SOURCE_MAX_CONNS must be at least 1 and MAX_CONNS at least SOURCE_MAX_CONNS")
	case c.BodyMinRate < 1:
		return errors.New("BODY_MIN_RATE must be positive")
	}
	if _, err := c.Proxies(); err != nil {
		return err
	}
	return nil
}

// Proxies parses TRUSTED_PROXIES.
func (c *Config) Proxies() (Proxies, error) {
	ps, err := ParsePrefixes(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	return ps, nil
}

// ParsePrefixes reads a comma-separated list of addresses and CIDR ranges.
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if !strings.Contains(f, "/") { // an address: the range of it alone
			var a netip.Addr
			a, err = netip.ParseAddr(f)
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Proxies tells a request's client address.
type Proxies []netip.Prefix

func (ps Proxies) trusted(a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Client is the address of the client that sent r: the peer, unless the
// peer is a trusted proxy; then the nearest address in X-Forwarded-For
// that is not a trusted proxy. A header that does not parse is not
// believed (the peer is the client).
func (ps Proxies) Client(r *http.Request) netip.Addr {
	peer := peerAddr(r.RemoteAddr)
	if len(ps) == 0 || !ps.trusted(peer) {
		return peer
	}
	xff := r.Header.Values("X-Forwarded-For")
	client := peer
	for i := len(xff) - 1; i >= 0; i-- {
		hops := strings.Split(xff[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.Trim(strings.TrimSpace(hops[j]), "[]"))
			if err != nil {
				return peer
			}
			client = a.Unmap()
			if !ps.trusted(client) {
				return client
			}
		}
	}
	return client
}

func peerAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		a, _ := netip.ParseAddr(remote)
		return a.Unmap()
	}
	return ap.Addr().Unmap()
}

// Source is the key an address is limited under: the address itself for
// IPv4, its /64 for IPv6 (one subscriber holds a whole /64).
func Source(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}
