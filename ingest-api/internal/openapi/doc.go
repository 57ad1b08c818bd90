// Package openapi embeds the OpenAPI 3 documents of ingest-api's two
// listeners, each served at /api/v1/openapi.json on its own listener and
// checked against its router and the handlers' answers by tests: the
// device API's (HTTP_ADDR) and the workspace API's (WORKSPACE_ADDR).
package openapi

import _ "embed"

// Device is the device API's document, JSON.
//
//go:embed device.json
var Device []byte

// Workspace is the workspace API's document, JSON.
//
//go:embed workspace.json
var Workspace []byte

// Path is where each listener serves its document.
const Path = "/api/v1/openapi.json"
