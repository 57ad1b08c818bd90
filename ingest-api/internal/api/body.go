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
	return readLimited(r, limit, buf)
}

// discardRest reads and drops what is left of a refused body, up to max
// bytes, as nginx's lingering close does: many clients (Python's urllib,
// embedded HTTP stacks) write their whole body before they read, and an
// answer sent while the body still arrives, followed by a close, reaches
// them as a broken pipe or a reset instead of the 413. It reports whether
// the body was read to its end; if not, the connection is closed after the
// answer (HTTP_READ_TIMEOUT bounds the time a slow sender gets).
func discardRest(r *http.Request, max int64) bool {
	n, err := io.CopyN(io.Discard, r.Body, max+1)
	return n <= max && err == io.EOF
}

func readLimited(r *http.Request, limit int64, buf *bytes.Buffer) (outcome.Code, error) {
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
