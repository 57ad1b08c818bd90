package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/health"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/pkg/retry"
)

// Health: liveness, and readiness answered from a check made in the
// background, so that no flood of probes reaches NATS or a writer.

func (s *Server) healthz(c echo.Context) error {
	if !s.paceProbe(c) {
		return nil
	}
	return c.JSON(http.StatusOK, Body{Success: true, Message: "alive"})
}

// The device door's health checks are paced per client address: beyond
// probeLimit in probeWindow (10 a second on average; a load balancer
// checks every few seconds) each is answered, truthfully, after
// probePause. A flood of them from one address then gets one answer per
// connection per pause instead of as many as it can ask (measured: 32
// connections asked 3,100 a second and raised the fleet's p99 from 164 to
// 278 ms). Operators' probes on METRICS_ADDR are not paced.
const (
	probeLimit  = 100
	probeWindow = 10 * time.Second
	probePause  = time.Second
)

// paceProbe counts a health check of the client's address and, past its
// limit, waits probePause; false: the client went away meanwhile.
func (s *Server) paceProbe(c echo.Context) bool {
	if _, over := s.probes.Fail(s.Proxies.Client(c.Request())); !over {
		return true
	}
	return retry.Sleep(c.Request().Context(), probePause)
}

// readyEvery is how often readiness is checked in the background.
const readyEvery = time.Second

// WatchReady checks readiness every readyEvery until ctx ends; Ready
// answers from the last check, so that no request to /readyz, however
// many, reaches NATS or a writer.
func (s *Server) WatchReady(ctx context.Context) error {
	t := time.NewTicker(readyEvery)
	defer t.Stop()
	said := ""
	for {
		err := s.check(ctx)
		s.readiness.Store(&err)
		said = s.logReadiness(err, said)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// logReadiness logs a change of readiness, with the cause that /readyz
// does not tell (said: the last logged text); it returns the new text.
func (s *Server) logReadiness(err error, said string) string {
	now := ""
	if err != nil {
		now = err.Error()
	}
	switch {
	case now == said:
	case err != nil:
		s.Log.Warn("not ready", zap.Error(err))
	default:
		s.Log.Info("ready")
	}
	return now
}

// Ready reports nil when, at the last background check, NATS was
// connected, the registry loaded and a writer answered on the storage
// path, and the server is not draining. Both /readyz listeners (the API's
// and METRICS_ADDR's) answer with it.
func (s *Server) Ready(context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	last := s.readiness.Load()
	if last == nil {
		return errors.New("not checked yet")
	}
	return *last
}

// check is one readiness check.
func (s *Server) check(ctx context.Context) error {
	switch {
	case !s.Query.Connected():
		return errors.New("nats disconnected")
	case !s.cache.IsSynced():
		return errors.New("registry not loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var resp query.Response
	_, err := s.Query.Ask(ctx, query.Ping, query.Request{}, &resp, &resp.Error)
	return health.Unready("storage unreachable", err)
}

func (s *Server) readyz(c echo.Context) error {
	if !s.paceProbe(c) {
		return nil
	}
	if err := s.Ready(c.Request().Context()); err != nil {
		return c.JSON(http.StatusServiceUnavailable, Body{Message: "not ready", Error: health.Condition(err)})
	}
	return c.JSON(http.StatusOK, Body{Success: true, Message: "ready"})
}
