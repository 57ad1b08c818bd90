// Package reads answers ingest-api's workspace read queries over NATS
// request-reply; writer-worker is the one program that talks to ClickHouse.
package reads

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/devicehub/eventservice/pkg/bus"
	"github.com/devicehub/eventservice/pkg/outcome"
	"github.com/devicehub/eventservice/pkg/query"
	"github.com/devicehub/eventservice/writer-worker/internal/chstore"
)

// Outcomes looks up the answered outcomes of keyed events (the writer does,
// from what it just answered and from ClickHouse).
type Outcomes func(ctx context.Context, ids []string) (map[string]outcome.Code, error)

// maxOutcomeIDs bounds one Outcome query.
const maxOutcomeIDs = 1000

// timeout bounds one query (ingest-api waits as long); the read user's
// ClickHouse profile bounds its cost on the server.
const timeout = 5 * time.Second

// Server answers queries, two per core at once.
type Server struct {
	nc       *nats.Conn
	prefix   string
	store    *chstore.Store
	outcomes Outcomes
	log      *zap.Logger
}

// New returns a server; Run starts it.
func New(nc *nats.Conn, prefix string, store *chstore.Store, outcomes Outcomes, log *zap.Logger) *Server {
	return &Server{nc: nc, prefix: prefix, store: store, outcomes: outcomes, log: log}
}

// Run answers queries until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ch := make(chan *nats.Msg, 256)
	sub, err := s.nc.ChanQueueSubscribe(s.prefix+"*", bus.QueryQueue, ch)
	if err != nil {
		return fmt.Errorf("subscribe queries: %w", err)
	}
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-ch:
					s.handle(ctx, m)
				}
			}
		})
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	wg.Wait()
	return nil
}

func (s *Server) handle(ctx context.Context, m *nats.Msg) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := s.answer(ctx, strings.TrimPrefix(m.Subject, s.prefix), m.Data)
	b, err := s.encode(resp, err)
	if err != nil {
		s.log.Warn("query failed", zap.String("subject", m.Subject), zap.Error(err))
		b, _ = json.Marshal(query.Response{Error: err.Error()})
	}
	if err := m.Respond(b); err != nil {
		s.log.Warn("respond", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// encode renders an answer, values as stored (no HTML escaping, which
// would make a value of '<' six times its size). An answer the
// connection cannot carry is an error, answered at once: the asker would
// otherwise wait its whole timeout for a reply that was never sent.
func (s *Server) encode(resp query.Response, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	if limit := s.nc.MaxPayload(); int64(buf.Len()) > limit {
		return nil, fmt.Errorf("answer of %d bytes is over the %d a NATS message holds", buf.Len(), limit)
	}
	return buf.Bytes(), nil
}

func (s *Server) answer(ctx context.Context, kind string, data []byte) (query.Response, error) {
	var req query.Request
	if err := json.Unmarshal(data, &req); err != nil {
		return query.Response{}, fmt.Errorf("bad query: %w", err)
	}
	if req.Limit < 1 || req.Limit > query.MaxLimit {
		req.Limit = query.DefaultLimit
	}
	var (
		resp   query.Response
		err    error
		budget = query.Budget(s.nc.MaxPayload())
	)
	switch kind {
	case query.Ping:
		err = s.store.Ping(ctx)
	case query.Messages:
		resp.Messages, resp.NextNs, err = s.store.Messages(ctx, req.Serial, req.Limit, budget, req.BeforeNs)
	case query.Latest:
		resp.Points, err = s.store.Latest(ctx, req.Entity, req.Input, budget)
	case query.Series:
		resp.Points, resp.NextMs, err = s.store.Series(ctx, req.Entity, req.Input, req.FromMs, req.ToMs, req.Limit, budget)
	case query.Buckets:
		if req.StepMs < 1 || query.BucketCount(req.FromMs, req.ToMs, req.StepMs) > query.MaxBuckets {
			return resp, fmt.Errorf("step must give at most %d buckets", query.MaxBuckets)
		}
		resp.Buckets, err = s.store.SeriesBuckets(ctx, req.Entity, req.Input, req.FromMs, req.ToMs, req.StepMs, budget)
	case query.LastSeen:
		if len(req.Serials) > query.MaxSerials {
			return resp, fmt.Errorf("at most %d serials per query", query.MaxSerials)
		}
		resp.LastSeen, err = s.store.LastSeen(ctx, req.Serials)
	case query.LatestOf:
		if len(req.Pairs) > query.MaxPairs {
			return resp, fmt.Errorf("at most %d inputs per query", query.MaxPairs)
		}
		resp.Points, err = s.store.LatestOf(ctx, req.Pairs, budget)
	case query.Outcome:
		if len(req.EventIDs) > maxOutcomeIDs {
			return resp, fmt.Errorf("at most %d event ids per query", maxOutcomeIDs)
		}
		resp.Outcomes, err = s.outcomes(ctx, req.EventIDs)
	case query.Diagnostics:
		var d query.DeviceDiagnostics
		d, err = s.store.Diagnostics(ctx, req.Serial, req.FromMs*1e6, req.ToMs*1e6)
		resp.Diagnostics = &d
	case query.Fleet:
		var f query.FleetView
		f, err = s.store.Fleet(ctx, req.FromMs*1e6, req.ToMs*1e6, time.Now())
		resp.Fleet = &f
	default:
		err = fmt.Errorf("unknown query %q", kind)
	}
	resp.Truncated = resp.NextMs > 0 || cut(resp.Points, resp.Buckets)
	return resp, err
}

// cut reports whether values were left out of an answer for their size.
func cut(points []query.Point, buckets []query.Bucket) bool {
	for _, p := range points {
		if p.ValueBytes > 0 {
			return true
		}
	}
	for _, b := range buckets {
		if b.LastBytes > 0 {
			return true
		}
	}
	return false
}
