package program

import (
	"context"
	"sync"
)

// Group owns a program's long-lived background parts (registry watch, health
// server, query server). They run until Stop, which cancels them and waits.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

// NewGroup returns a group that can hold up to max parts.
func NewGroup(max int) *Group {
	ctx, cancel := context.WithCancel(context.Background())
	return &Group{ctx: ctx, cancel: cancel, errs: make(chan error, max)}
}

// Go runs f until Stop; an error it returns is reported on Err.
func (g *Group) Go(f func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(g.ctx); err != nil {
			g.errs <- err
		}
	}()
}

// Err delivers the error of a part that failed.
func (g *Group) Err() <-chan error { return g.errs }

// Stop cancels every part and waits for all of them.
func (g *Group) Stop() {
	g.cancel()
	g.wg.Wait()
}
