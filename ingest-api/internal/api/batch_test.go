package api

import (
	"encoding/json"
	"testing"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

func TestParseBatchChecksInTheSpecsOrder(t *testing.T) {
	for _, c := range []struct {
		name, body, header string
		code               outcome.Code
		detail             string
	}{
		{"not JSON", `{"serial":`, "", outcome.InvalidFormat, ""},
		{"not an object", `[{"serial":"s"}]`, "", outcome.InvalidFormat, ""},
		{"no serial before no token", `{"messages":[]}`, "", outcome.MissingSerial, ""},
		{"serial not a string", `{"serial":5,"accessToken":"t","messages":[{"data":{}}]}`, "", outcome.MissingSerial, ""},
		{"no token before no messages", `{"serial":"s"}`, "", outcome.MissingToken, ""},
		{"messages absent", `{"serial":"s","accessToken":"t"}`, "", outcome.EmptyMessages, ""},
		{"messages not an array", `{"serial":"s","messages":{"data":{}}}`, "tok", outcome.EmptyMessages, ""},
		{"messages empty", `{"serial":"s","messages":[ ]}`, "tok", outcome.EmptyMessages, ""},
		{"too many", `{"serial":"s","messages":[{"data":{}},{"data":{}},{"data":{}},{"data":{}}]}`, "tok", outcome.TooManyMessages,
			"Too many messages in one request (at most 3)"},
		{"well-formed", `{"serial":"s","accessToken":"t","messages":[{"data":{}},5,{}]}`, "", outcome.Stored, ""},
		{"messages twice", `{"serial":"s","messages":[{"data":{}}],"messages":[{"data":{}}]}`, "tok", outcome.InvalidFormat, ""},
		{"serial twice", `{"serial":"s","serial":"u","messages":[{"data":{}}]}`, "tok", outcome.InvalidFormat, ""},
		{"accessToken twice", `{"serial":"s","accessToken":"t","accessToken":"u","messages":[{"data":{}}]}`, "", outcome.InvalidFormat, ""},
		{"a byte order mark", "\xEF\xBB\xBF{\"serial\":\"s\",\"accessToken\":\"t\",\"messages\":[{\"data\":{}},5,{}]}", "", outcome.Stored, ""},
	} {
		r, code, detail := parseBatch([]byte(c.body), c.header, 3)
		if code != c.code || detail != c.detail {
			t.Errorf("%s: %v %q, want %v %q", c.name, code, detail, c.code, c.detail)
		}
		if code == outcome.Stored && (r.Serial != "s" || r.BodyToken != "t" || len(r.Messages) != 3) {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
	_, status := edge.BodyFor(outcome.EmptyMessages, "s", "")
	if status.Message != "Invalid data format" || status.Error != "Messages must be a non-empty array" {
		t.Fatalf("empty messages answer %+v", status)
	}
	code, b := edge.BodyFor(outcome.TooManyMessages, "s", "Too many messages in one request (at most 3)")
	if code != 413 || b.Message != "Payload too large" || b.Error != "Too many messages in one request (at most 3)" {
		t.Fatalf("too many answer %d %+v", code, b)
	}
}

func TestParseBatchMessages(t *testing.T) {
	body := `{"serial":"dev \"1\"","messages":[
		{"ts":1795313472345,"data":{"t":1,"datetime":null}},
		"x",
		{"data":"not an object"},
		{"ts":"2026-11-22t10:11:12.345z","accessToken":"secret","serial":"other","data":{"t":2}},
		{"no":"data"},
		{"data":{"t":1},"data":{"t":2}},
		{"data":{"t":1e400}}]}`
	r, code, _ := parseBatch([]byte(body), "tok", 1000)
	if code != outcome.Stored {
		t.Fatal(code)
	}
	want := []struct {
		code    outcome.Code
		ts      string
		payload string
	}{
		{outcome.Stored, `1795313472345`, `{"serial":"dev \"1\"","ts":1795313472345,"data":{"t":1,"datetime":null}}`},
		{outcome.InvalidFormat, ``, ``},
		{outcome.InvalidData, ``, `{"serial":"dev \"1\"","data":"not an object"}`},
		{outcome.Stored, `"2026-11-22t10:11:12.345z"`, `{"serial":"dev \"1\"","ts":"2026-11-22t10:11:12.345z","data":{"t":2}}`},
		{outcome.InvalidData, ``, `{"serial":"dev \"1\"","no":"data"}`},
		{outcome.InvalidFormat, ``, ``},
		{outcome.InvalidData, ``, `{"serial":"dev \"1\"","data":{"t":1e400}}`},
	}
	for i, w := range want {
		m := r.Messages[i]
		if m.Code != w.code || string(m.TS) != w.ts || string(m.Payload) != w.payload {
			t.Errorf("message %d: %v %s %s, want %v %s %s", i, m.Code, m.TS, m.Payload, w.code, w.ts, w.payload)
		}
	}
}

// FuzzParseBatch: no body panics; a well-formed batch has 1 to max
// messages, and every payload is a JSON object naming the request's serial
// and holding no accessToken.
func FuzzParseBatch(f *testing.F) {
	for _, s := range []string{
		`{"serial":"s","accessToken":"t","messages":[{"data":{"a":1}},{"ts":5,"data":{}}]}`,
		`{"serial":"s","messages":[1,"x",null,{"data":null},{"accessToken":"t","data":{}}]}`,
		`{"serial":"s","messages":[]}`, `{"serial":"s","messages":{}}`, `[]`, `{"serial":"\u0000","messages":[{}]}`,
		`{"serial":"s","messages":[{"data":{},"data":{}},{"data":{"a":-1e999}}]}`, "\xEF\xBB\xBF{\"serial\":\"s\",\"messages\":[{\"data\":{}}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, code, _ := parseBatch(body, "hdr", 10)
		if code != outcome.Stored {
			return
		}
		if len(r.Messages) < 1 || len(r.Messages) > 10 {
			t.Fatalf("%d messages", len(r.Messages))
		}
		for _, m := range r.Messages {
			if m.Code == outcome.InvalidFormat {
				continue
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(m.Payload, &obj); err != nil {
				t.Fatalf("payload %q: %v", m.Payload, err)
			}
			var serial string
			if err := json.Unmarshal(obj["serial"], &serial); err != nil || serial != r.Serial {
				t.Fatalf("payload %q names serial %q, want %q", m.Payload, serial, r.Serial)
			}
			if _, ok := obj["accessToken"]; ok {
				t.Fatalf("payload %q keeps a token", m.Payload)
			}
		}
	})
}
