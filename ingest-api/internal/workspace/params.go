package workspace

import (
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Path parameters mean their decoded values, in every route: a serial
// AA:BB:CC is reached as /devices/AA%3ABB%3ACC (what encodeURIComponent and
// the console send) as well as /devices/AA:BB:CC, and a serial with a "/"
// as /devices/A%2FB. Echo routes on the raw path when the request has one
// and on the decoded path when not, and never decodes a parameter; so every
// request is routed on its escaped form (escapedPath, before routing) and
// every parameter is decoded once, here (decodeParams, after routing).
// Handlers read c.Param as usual and see the value a device sends.

// escapedPath makes Echo route r on its escaped path: "%2F" in a segment
// stays inside the segment, and a segment's "%25" is not read as the start
// of another escape.
func escapedPath(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := c.Request().URL
		u.RawPath = u.EscapedPath()
		return next(c)
	}
}

// decodeParams replaces each path parameter of the route with its decoded
// value; one that does not decode is answered 400.
func (s *Server) decodeParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		values := c.ParamValues()
		decoded := make([]string, len(values))
		for i, v := range values {
			d, err := url.PathUnescape(v)
			if err != nil {
				return s.respond(c, outcome.BadRequest, "", "", "the path's "+c.ParamNames()[i]+" is not percent-encoded")
			}
			decoded[i] = d
		}
		c.SetParamValues(decoded...)
		return next(c)
	}
}

// dotSegment reports whether a name could not be a path segment: a URL
// parser (every browser's, the console's) reads "." and ".." as "this
// directory" and "the one above", even percent-encoded, so a device or
// entity of that name could not be reached.
func dotSegment(name string) bool { return name == "." || name == ".." }
