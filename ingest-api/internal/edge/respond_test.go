package edge

import (
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/devicehub/eventservice/pkg/outcome"
)

// Client text in a log line is cut to logTextMax bytes with its length,
// without splitting a character.
func TestClip(t *testing.T) {
	if got := Clip("dev-1"); got != "dev-1" {
		t.Fatalf("short text changed: %q", got)
	}
	long := strings.Repeat("é", 200) // 400 bytes
	got := Clip(long)
	if !strings.HasSuffix(got, "...(400 bytes)") || len(got) > logTextMax+len("...(400 bytes)") || !utf8.ValidString(got) {
		t.Fatalf("clipped to %d bytes: %q", len(got), got)
	}
}

// The pre-rendered success answer is what Echo renders for it.
func TestStoredAnswerIsRenderedAsEchoWould(t *testing.T) {
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest("POST", "/", nil), rec)
	status, body := BodyFor(outcome.Stored, "", "")
	if err := c.JSON(status, body); err != nil {
		t.Fatal(err)
	}
	if rec.Body.String() != string(storedJSON) {
		t.Fatalf("Echo renders %q, pre-rendered %q", rec.Body.String(), storedJSON)
	}
}
