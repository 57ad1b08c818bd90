package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/labstack/echo/v4"
)

// API is an OpenAPI document, validated, that checks requests and answers
// against itself (kin-openapi).
type API struct {
	Doc    *openapi3.T
	router routers.Router
}

// OpenAPI loads and validates the document raw.
func OpenAPI(t testing.TB, raw []byte) *API {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	doc.Servers = nil // match any host
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &API{Doc: doc, router: router}
}

// Check reports how an exchange differs from what the document says: the
// request (its path, parameters and body; security is the server's to
// check) and the answer (an undocumented status, a header or a body that
// does not match).
func (a *API) Check(method, target string, reqHeader http.Header, reqBody []byte, status int, header http.Header, body []byte) error {
	req := httptest.NewRequest(method, target, bytes.NewReader(reqBody))
	for k, vs := range reqHeader {
		req.Header[k] = vs
	}
	route, params, err := a.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	ctx := context.Background()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: in.Options}
	out.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(ctx, out)
}

// ValidRequest reports whether a request matches the document.
func (a *API) ValidRequest(method, target string, header http.Header, body []byte) error {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	route, params, err := a.router.FindRoute(req)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}})
}

// RoutesDocumented reports every route of a router that is not in the
// document and every documented operation that is not a route, and returns
// how many routes it saw. Echo's own not-found routes and the console's
// pages and assets (not the API: docs/console.md) are left out.
func (a *API) RoutesDocumented(t testing.TB, routes []*echo.Route) int {
	t.Helper()
	documented := map[string]bool{}
	for path, item := range a.Doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	routed := map[string]bool{}
	for _, r := range routes {
		if strings.HasPrefix(r.Method, "echo_") || r.Path == "/console" || strings.HasPrefix(r.Path, "/console/") {
			continue
		}
		op := r.Method + " " + pathParam.ReplaceAllString(r.Path, "{$1}")
		routed[op] = true
		if !documented[op] {
			t.Errorf("route %s is not in the OpenAPI document", op)
		}
	}
	for op := range documented {
		if !routed[op] {
			t.Errorf("documented %s is not a route", op)
		}
	}
	return len(routed)
}

// pathParam is an Echo path parameter (":serial").
var pathParam = regexp.MustCompile(`:(\w+)`)
