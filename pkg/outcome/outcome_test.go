package outcome

import "testing"

// The spec's section 7 and section 4 texts, to the letter.
func TestSpecTexts(t *testing.T) {
	for _, tc := range []struct {
		code           Code
		status         int
		message, error string
	}{
		{Stored, 200, "Message processed and data stored successfully", ""},
		{InvalidFormat, 400, "Invalid message format", "Message must be a valid JSON object"},
		{MissingSerial, 400, "Missing serial number", "Device serial number is required"},
		{MissingToken, 401, "Missing access token", "Device access token is required (either in data or as Bearer token)"},
		{InvalidData, 400, "Invalid data format", "Message data must be a valid object"},
		{DeviceNotFound, 404, "Device not found", "Device with serial SN-1 not found"},
		{InvalidToken, 401, "Invalid access token", "Invalid access token for device with serial SN-1"},
		{NoConnections, 422, "No connections configured", "No connections found for this device"},
		{StorageFailed, 503, "Message processed but failed to store data", "storage error: boom"},
		{ProcessingFailed, 503, "Failed to process message", "storage error: boom"},
		{Internal, 500, "Failed to process message", "storage error: boom"},
		{RateLimited, 429, "Rate limit exceeded", "Too many requests for device with serial SN-1"},
	} {
		row := Lookup(tc.code)
		if row.Status != tc.status || row.Message != tc.message {
			t.Errorf("%v: %d %q, want %d %q", tc.code, row.Status, row.Message, tc.status, tc.message)
		}
		if tc.error != "" {
			if got := row.Error("SN-1", "storage error: boom"); got != tc.error {
				t.Errorf("%v error = %q, want %q", tc.code, got, tc.error)
			}
		}
		if (row.RetryAfter > 0) != (tc.status == 503 || tc.status == 429) {
			t.Errorf("%v: Retry-After %d with status %d", tc.code, row.RetryAfter, tc.status)
		}
	}
}

func TestEveryCodeNamedAndUnknownIsFailure(t *testing.T) {
	seen := map[string]bool{}
	for c := Code(0); Valid(c); c++ {
		if c.String() == "" || seen[c.String()] || Lookup(c).Message == "" || Lookup(c).Status == 0 {
			t.Errorf("code %d incomplete, or its name %q taken", c, c.String())
		}
		seen[c.String()] = true
	}
	if Valid(200) || Lookup(200).Status != 500 || Code(200).String() != "code_200" {
		t.Error("an unknown code must read as an internal failure")
	}
}
