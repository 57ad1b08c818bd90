package program

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"
)

// Part is one long-lived piece of a program: a registry watch, a health
// server, a consumer, the HTTP server.
type Part struct {
	Name string
	// Run works until ctx ends, then finishes what it holds (drains) and
	// returns. Returning before ctx ends is a failure of the program.
	Run func(ctx context.Context) error
	// Ready, when set, is closed once the part can serve the stages after
	// it (the registry loaded, say). A nil Ready is ready at once.
	Ready <-chan struct{}
}

// Stage is parts that start together.
type Stage []Part

// Run is the lifecycle every program follows. Stages start in order: each
// once the parts of the one before are ready. Run returns when ctx ends or a
// part fails, after stopping the stages in reverse order: a stage is told to
// stop only once every part of the stages after it has returned, so what
// drains last (the HTTP server, a consumer) still has what it depends on (the
// publisher, the registry, the health server). It returns the first failure,
// or what parts returned while stopping.
func Run(ctx context.Context, log *zap.Logger, stages ...Stage) error {
	type running struct {
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	var (
		started []*running
		mu      sync.Mutex
		drained []error // errors returned after being told to stop
	)
	parts := 0
	for _, st := range stages {
		parts += len(st)
	}
	failed := make(chan error, parts) // each part fails at most once
	var failure error

start:
	for i, st := range stages {
		sctx, cancel := context.WithCancel(context.Background())
		r := &running{cancel: cancel}
		started = append(started, r)
		for _, p := range st {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				err := p.Run(sctx)
				if sctx.Err() == nil {
					if err == nil {
						err = errors.New("ended")
					}
					failed <- fmt.Errorf("%s: %w", p.Name, err)
					return
				}
				if err != nil {
					mu.Lock()
					drained = append(drained, fmt.Errorf("%s: %w", p.Name, err))
					mu.Unlock()
				}
			}()
		}
		for _, p := range st {
			if p.Ready == nil {
				continue
			}
			select {
			case <-p.Ready:
			case failure = <-failed:
				break start
			case <-ctx.Done():
				break start
			}
		}
		log.Debug("stage started", zap.Int("stage", i+1), zap.Int("parts", len(st)))
	}
	if failure == nil && len(started) == len(stages) {
		select {
		case <-ctx.Done():
		case failure = <-failed:
		}
	}
	if failure != nil {
		log.Error("stopping: a part failed", zap.Error(failure))
	}
	for i := len(started) - 1; i >= 0; i-- {
		started[i].cancel()
		started[i].wg.Wait()
	}
	if failure != nil {
		return failure
	}
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(drained...)
}
