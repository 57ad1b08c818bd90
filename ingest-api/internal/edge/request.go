package edge

import (
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// RetryAfter tells the client when to come back: wait in whole seconds,
// at least one.
func RetryAfter(c echo.Context, wait time.Duration) {
	secs := int((wait + time.Second - 1) / time.Second)
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
}

// Bearer returns the token of an "Authorization: Bearer <token>" header; the
// scheme is case-insensitive. Any other scheme yields no token.
func Bearer(h string) string {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(h[len(scheme):])
}
