// Package openapi embeds the OpenAPI 3 document of ingest-api's endpoints,
// served at /api/v1/openapi.json and checked against the router and the
// handlers' answers by tests.
package openapi

import _ "embed"

// Doc is the document, JSON.
//
//go:embed openapi.json
var Doc []byte

// Path is where ingest-api serves it.
const Path = "/api/v1/openapi.json"
