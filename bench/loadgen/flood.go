package main

import (
	"fmt"
	"net"
	"sync"
	"time"
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
// that a bot's requests are botsAtOnce apart (25 ms at 10,000/s) and
// mostly find its connection idle; after perSource requests each, the next
// group takes over.
const botsAtOnce = 256

// botsFor is how many bots send n requests.
func botsFor(n, perSource int) int {
	group := botsAtOnce * perSource
	return n/group*botsAtOnce + min(botsAtOnce, n%group)
}

// botnet is a flood's pool: request i comes from the address of its bot
// (botAddr) on a connection of that address's own. Connections of a group
// of bots the flood has moved past are closed; at most max are open.
type botnet struct {
	host      string
	perSource int
	slots     chan struct{} // one per open connection

	mu    sync.Mutex
	group int             // the latest group of bots handed out
	idle  map[int][]*conn // by bot
	dials int
}

func newBotnet(host string, perSource, max int) *botnet {
	return &botnet{host: host, perSource: perSource, slots: make(chan struct{}, max), idle: map[int][]*conn{}}
}

// bot is the bot that sends request i.
func (b *botnet) bot(i int) int {
	return i/(botsAtOnce*b.perSource)*botsAtOnce + i%botsAtOnce
}

func (b *botnet) get(i int) (*conn, error) {
	a := b.bot(i)
	b.mu.Lock()
	if g := a / botsAtOnce; g > b.group {
		for old, cs := range b.idle {
			if old/botsAtOnce < g {
				b.closeAll(cs)
				delete(b.idle, old)
			}
		}
		b.group = g
	}
	if cs := b.idle[a]; len(cs) > 0 {
		b.idle[a] = cs[:len(cs)-1]
		b.mu.Unlock()
		return cs[len(cs)-1], nil
	}
	b.dials++
	b.mu.Unlock()
	b.slot()
	c, err := dialFrom(b.host, botAddr(a))
	if err != nil {
		<-b.slots
	}
	return c, err
}

// slot takes a slot for a new connection: a free one, else that of an
// idle connection of another bot, closed; while every connection is in
// flight it waits for one to come back.
func (b *botnet) slot() {
	for {
		select {
		case b.slots <- struct{}{}:
			return
		default:
		}
		freed := false
		b.mu.Lock()
		for a, cs := range b.idle {
			if len(cs) > 0 {
				b.closeAll(cs[len(cs)-1:])
				b.idle[a], freed = cs[:len(cs)-1], true
				break
			}
		}
		b.mu.Unlock()
		if !freed {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (b *botnet) put(i int, c *conn, failed bool) {
	a := b.bot(i)
	b.mu.Lock()
	defer b.mu.Unlock()
	if failed || a/botsAtOnce < b.group {
		b.closeAll([]*conn{c})
		return
	}
	b.idle[a] = append(b.idle[a], c)
}

func (b *botnet) closeAll(cs []*conn) {
	for _, c := range cs {
		c.close()
		<-b.slots
	}
}

func (b *botnet) opened() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dials
}

func (b *botnet) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for a, cs := range b.idle {
		b.closeAll(cs)
		delete(b.idle, a)
	}
}
