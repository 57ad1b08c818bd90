package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// ceiling is the yardstick: an Echo handler that decodes and checks the same
// request as ingest-api (JSON object, serial, token, data, device, token
// match) and stores nothing.
type ceiling struct {
	tokens map[string][32]byte
	srv    *http.Server
	addr   string
}

func startCeiling(tokens map[string]string) (*ceiling, error) {
	c := &ceiling{tokens: make(map[string][32]byte, len(tokens))}
	for serial, tok := range tokens {
		c.tokens[serial] = sha256.Sum256([]byte(tok))
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/api/v1/deviceapi/event", c.handle)
	e.POST("/api/v1/deviceapi/events", c.handle)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.addr = ln.Addr().String()
	c.srv = &http.Server{Handler: e}
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

type answer struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func (c *ceiling) handle(ctx echo.Context) error {
	body, err := io.ReadAll(io.LimitReader(ctx.Request().Body, 1<<20))
	var req struct {
		Serial      string          `json:"serial"`
		AccessToken string          `json:"accessToken"`
		Data        json.RawMessage `json:"data"`
		Messages    []struct {
			Data json.RawMessage `json:"data"`
		} `json:"messages"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil {
		return ctx.JSON(400, answer{Message: "Invalid message format", Error: "Message must be a valid JSON object"})
	}
	if req.Serial == "" {
		return ctx.JSON(400, answer{Message: "Missing serial number", Error: "Device serial number is required"})
	}
	tok := req.AccessToken
	if h := ctx.Request().Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		tok = h[7:]
	}
	for _, m := range req.Messages { // a backlog: every message's data is checked
		req.Data = m.Data
		if len(m.Data) == 0 || m.Data[0] != '{' {
			break
		}
	}
	if len(req.Data) == 0 || req.Data[0] != '{' {
		return ctx.JSON(400, answer{Message: "Invalid data format", Error: "Message data must be a valid object"})
	}
	want, ok := c.tokens[req.Serial]
	if !ok {
		return ctx.JSON(404, answer{Message: "Device not found", Error: "Device with serial " + req.Serial + " not found"})
	}
	got := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return ctx.JSON(401, answer{Message: "Invalid access token", Error: "Invalid access token for device with serial " + req.Serial})
	}
	return ctx.JSON(200, answer{Success: true, Message: "Message processed and data stored successfully"})
}

func (c *ceiling) close() { _ = c.srv.Close() }
