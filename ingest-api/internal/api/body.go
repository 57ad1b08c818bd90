package api

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/devicehub/eventservice/pkg/outcome"
)

var errTooLarge = errors.New("body too large")

// readBody reads at most limit bytes of the request body, inflating it when
// it is gzip encoded (the inflated size is bounded too). The Content-Type is
// not consulted: devices label JSON in many ways.
func readBody(r *http.Request, limit int64, buf *bytes.Buffer) (outcome.Code, error) {
	if r.ContentLength > limit {
		return outcome.PayloadTooLarge, errTooLarge
	}
	var src io.Reader = r.Body
	if enc := strings.TrimSpace(r.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		if !strings.EqualFold(enc, "gzip") {
			return outcome.InvalidFormat, errors.New("unsupported content encoding")
		}
		zr, err := gzip.NewReader(io.LimitReader(r.Body, limit+1))
		if err != nil {
			return outcome.InvalidFormat, err
		}
		defer zr.Close()
		src = zr
	}
	n, err := buf.ReadFrom(io.LimitReader(src, limit+1))
	if n > limit {
		return outcome.PayloadTooLarge, errTooLarge
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return outcome.PayloadTooLarge, errTooLarge
		}
		return outcome.InvalidFormat, err
	}
	return outcome.Stored, nil
}
