//go:build !nodiag

package main

import "github.com/devicehub/eventservice/pkg/diag"

// counted is the Tally the API counts device answers in. A build with
// -tags nodiag counts nothing, so that the counting can be priced on a
// running stack (docs/performance.md, "Diagnostics under a flood").
func counted(t *diag.Tally) *diag.Tally { return t }
