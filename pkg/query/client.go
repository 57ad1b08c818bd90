package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Client asks writer-worker (any copy) over NATS request-reply.
type Client struct {
	nc      *nats.Conn
	prefix  string // bus.Names.QueryPrefix
	timeout time.Duration
}

// NewClient returns a Client asking under prefix, each question waiting at
// most timeout.
func NewClient(nc *nats.Conn, prefix string, timeout time.Duration) *Client {
	return &Client{nc: nc, prefix: prefix, timeout: timeout}
}

// Connected reports whether the client's connection is up.
func (c *Client) Connected() bool { return c.nc.IsConnected() }

// Ask sends req as a query of kind and decodes the answer into out, whose
// Error field errText points at. An error comes with the outcome to answer:
// ProcessingFailed when no writer answered or one reported an error,
// Internal when the answer could not be read.
func (c *Client) Ask(ctx context.Context, kind string, req Request, out any, errText *string) (outcome.Code, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	b, _ := json.Marshal(req)
	m, err := c.nc.RequestWithContext(ctx, c.prefix+kind, b)
	if err != nil {
		return outcome.ProcessingFailed, fmt.Errorf("query storage: %w", err)
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return outcome.Internal, fmt.Errorf("query storage: %w", err)
	}
	if *errText != "" {
		return outcome.ProcessingFailed, errors.New(*errText)
	}
	return outcome.Stored, nil
}

// Outcomes are the recorded outcomes of those of ids (keyed events) an
// earlier attempt was answered with.
func (c *Client) Outcomes(ctx context.Context, ids []string) (map[string]outcome.Code, outcome.Code, error) {
	var resp Response
	code, err := c.Ask(ctx, Outcome, Request{EventIDs: ids}, &resp, &resp.Error)
	return resp.Outcomes, code, err
}
