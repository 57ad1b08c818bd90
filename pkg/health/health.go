// Package health serves /healthz and /readyz for the worker programs, in the
// same JSON shape as every other answer of the service.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server answers /healthz (the process is alive), /readyz (ready reports
// nil) and /debug/pprof. Extra handlers (such as /metrics) may be mounted on Mux.
type Server struct {
	Mux      *http.ServeMux
	addr     string
	ready    func(context.Context) error
	timeouts timeouts
}

// timeouts bound every connection of the listener: none stays open for
// ever, idle between requests or trickling one (net/http/pprof extends the
// write bound of a profile or trace by the seconds asked for).
type timeouts struct{ header, read, write, idle time.Duration }

var defaultTimeouts = timeouts{header: 5 * time.Second, read: 10 * time.Second, write: 10 * time.Second, idle: time.Minute}

// New returns a server for addr; ready decides /readyz.
func New(addr string, ready func(context.Context) error) *Server {
	s := &Server{Mux: http.NewServeMux(), addr: addr, ready: ready, timeouts: defaultTimeouts}
	s.Mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, true, "alive", "")
	})
	s.Mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.ready(ctx); err != nil {
			write(w, http.StatusServiceUnavailable, false, "not ready", Condition(err))
			return
		}
		write(w, http.StatusOK, true, "ready", "")
	})
	// Profiles, for the operator (this listener stays off the public
	// network): a CPU profile costs what it samples.
	s.Mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.Mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.Mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.Mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.Mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusNotFound, false, "Not found", "No such endpoint")
	})
	return s
}

// NotReady is a readiness failure: the condition a /readyz answer names
// (such as "storage unreachable"), and the cause, for logs only (it may
// hold addresses and server error texts).
type NotReady struct {
	Cond string
	Err  error
}

func (e *NotReady) Error() string { return e.Cond + ": " + e.Err.Error() }
func (e *NotReady) Unwrap() error { return e.Err }

// Unready is err as a NotReady of condition cond, or nil when err is.
func Unready(cond string, err error) error {
	if err == nil {
		return nil
	}
	return &NotReady{Cond: cond, Err: err}
}

// Condition is what a /readyz answer says of err: a NotReady's condition,
// or err's text (a ready function's own errors name conditions).
func Condition(err error) string {
	if nr, ok := errors.AsType[*NotReady](err); ok {
		return nr.Cond
	}
	return err.Error()
}

func write(w http.ResponseWriter, status int, ok bool, msg, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
		Error   string `json:"error,omitempty"`
	}{ok, msg, detail})
}

// Run serves until ctx ends. An empty address disables the server.
func (s *Server) Run(ctx context.Context) error {
	if s.addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("health listen: %w", err)
	}
	t := s.timeouts
	hs := &http.Server{Handler: s.Mux, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-done
		return nil
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("health serve: %w", err)
	}
}
