package main

import (
	"fmt"
	"net"
	"sync"
)

// Flood kinds (-flood): what a stranger sends beside the honest fleet.
const (
	floodUnknown = "unknown" // a serial never provisioned, a new one every request (404)
	floodToken   = "token"   // a provisioned serial with a wrong token (401)
)

// floodReq renders request i of a flood of kind: an unknown serial unique
// to the run and i, or the provisioned serials in turn with a wrong token.
func floodReq(host, kind, runID string, serials []string) func(i int) []byte {
	return func(i int) []byte {
		serial, token := fmt.Sprintf("u-%s-%d", runID, i), "flood-token"
		if kind == floodToken {
			serial, token = serials[i%len(serials)], fmt.Sprintf("wrong-%s-%d", runID, i)
		}
		return request(host, "/api/v1/deviceapi/event", token, fmt.Appendf(nil, `{"serial":%q,"data":{"v":1}}`, serial))
	}
}

// botAddrs is how many addresses botAddr tells apart.
const botAddrs = 246 * 256 * 254

// botAddr is the a-th address of a botnet: 127.10.0.1 onwards, the last
// byte 1 to 254, wrapping after botAddrs; apart from the fleet's 127.0.1.x
// and the default 127.0.0.1.
func botAddr(a int) net.IP {
	a %= botAddrs
	return net.IPv4(127, byte(10+a/(256*254)), byte(a/254%256), byte(1+a%254))
}

// botsAtOnce is how many addresses of a botnet send at a time: request i
// comes from bot (i/(botsAtOnce*perSource))*botsAtOnce + i%botsAtOnce, so
// that a bot's requests are botsAtOnce apart (25 ms at 10,000/s); after
// perSource requests each, the next group takes over.
const botsAtOnce = 256

// botsFor is how many bots send n requests.
func botsFor(n, perSource int) int {
	group := botsAtOnce * perSource
	return n/group*botsAtOnce + min(botsAtOnce, n%group)
}

// botnet is a flood's pool: request i comes from the address of its bot
// (botAddr) on the bot's one connection, as a bot on HTTP/1.1 sends; a
// request whose bot's connection is busy waits for it (so at most
// botsAtOnce requests are in flight, with the clock of those due running).
// The connections of a group of bots the flood has moved past are closed.
type botnet struct {
	host      string
	perSource int

	mu    sync.Mutex
	group int                // the latest group of bots handed out
	bots  map[int]chan *conn // by bot: its connection when idle (nil: dial again)
	dials int
}

func newBotnet(host string, perSource int) *botnet {
	return &botnet{host: host, perSource: perSource, bots: map[int]chan *conn{}}
}

// bot is the bot that sends request i.
func (b *botnet) bot(i int) int {
	return i/(botsAtOnce*b.perSource)*botsAtOnce + i%botsAtOnce
}

func (b *botnet) get(i int) (*conn, error) {
	a := b.bot(i)
	b.mu.Lock()
	if g := a / botsAtOnce; g > b.group {
		for old, ch := range b.bots {
			if old/botsAtOnce < g {
				b.drop(old, ch)
			}
		}
		b.group = g
	}
	ch := b.bots[a]
	if ch == nil {
		ch = make(chan *conn, 1)
		b.bots[a] = ch
	} else {
		b.mu.Unlock()
		c := <-ch // its last request is back (the scheduler is the only taker)
		b.mu.Lock()
		if c != nil {
			b.mu.Unlock()
			return c, nil
		}
	}
	b.dials++
	b.mu.Unlock()
	c, err := dialFrom(b.host, botAddr(a))
	if err != nil {
		ch <- nil
	}
	return c, err
}

func (b *botnet) put(i int, c *conn, failed bool) {
	a := b.bot(i)
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.bots[a]
	if failed || ch == nil {
		c.close()
		c = nil
	}
	if ch != nil {
		ch <- c
	}
}

// drop forgets bot a, closing its connection if idle (else put will).
func (b *botnet) drop(a int, ch chan *conn) {
	select {
	case c := <-ch:
		if c != nil {
			c.close()
		}
	default:
	}
	delete(b.bots, a)
}

func (b *botnet) opened() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dials
}

func (b *botnet) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for a, ch := range b.bots {
		b.drop(a, ch)
	}
}
