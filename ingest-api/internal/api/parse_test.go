package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/devicehub/eventservice/ingest-api/internal/edge"
	"github.com/devicehub/eventservice/pkg/outcome"
)

func TestParsePrecedence(t *testing.T) {
	for _, tc := range []struct {
		name, body, header string
		want               outcome.Code
		serial, bodyToken  string
	}{
		{"garbage", `{`, "t", outcome.InvalidFormat, "", ""},
		{"array", `[]`, "t", outcome.InvalidFormat, "", ""},
		{"null", `null`, "t", outcome.InvalidFormat, "", ""},
		{"number", `12`, "t", outcome.InvalidFormat, "", ""},
		{"trailing junk", `{"serial":"a","data":{}} x`, "t", outcome.InvalidFormat, "", ""},
		{"format beats all", `"s"`, "", outcome.InvalidFormat, "", ""},
		{"no serial", `{"data":{}}`, "t", outcome.MissingSerial, "", ""},
		{"empty serial", `{"serial":"","data":{}}`, "t", outcome.MissingSerial, "", ""},
		{"numeric serial", `{"serial":5,"data":{}}`, "t", outcome.MissingSerial, "", ""},
		{"serial beats token", `{"data":1}`, "", outcome.MissingSerial, "", ""},
		{"no token", `{"serial":"a","data":{}}`, "", outcome.MissingToken, "", ""},
		{"non-string body token", `{"serial":"a","accessToken":5,"data":{}}`, "", outcome.MissingToken, "", ""},
		{"token beats data", `{"serial":"a","data":1}`, "", outcome.MissingToken, "", ""},
		{"data string", `{"serial":"a","data":"x"}`, "t", outcome.InvalidData, "", ""},
		{"data array", `{"serial":"a","data":[]}`, "t", outcome.InvalidData, "", ""},
		{"data null", `{"serial":"a","data":null}`, "t", outcome.InvalidData, "", ""},
		{"data absent", `{"serial":"a"}`, "t", outcome.InvalidData, "", ""},
		{"header token", `{"serial":"a","data":{"x":1}}`, "t", outcome.Stored, "a", ""},
		{"body token", `{"serial":"a","accessToken":"b","data":{"x":1}}`, "", outcome.Stored, "a", "b"},
		{"whitespace", " \n{ \"serial\" : \"a\" , \"data\" : { } }\n", "t", outcome.Stored, "a", ""},
		{"a byte order mark is skipped", "\xEF\xBB\xBF{\"serial\":\"a\",\"data\":{\"x\":1}}", "t", outcome.Stored, "a", ""},
		{"a byte order mark elsewhere", "{\"serial\":\"a\",\"data\":{}}\xEF\xBB\xBF", "t", outcome.InvalidFormat, "", ""},
		{"serial twice", `{"serial":"A","serial":"B","data":{"x":1}}`, "t", outcome.InvalidFormat, "", ""},
		{"serial twice, one escaped", `{"serial":"A","seri\u0061l":"B","data":{"x":1}}`, "t", outcome.InvalidFormat, "", ""},
		{"accessToken twice", `{"serial":"a","accessToken":"b","accessToken":"c","data":{"x":1}}`, "", outcome.InvalidFormat, "", ""},
		{"data twice", `{"serial":"a","data":{"x":1},"data":{"x":2}}`, "t", outcome.InvalidFormat, "", ""},
		{"ts twice", `{"serial":"a","ts":1,"ts":2,"data":{"x":1}}`, "t", outcome.InvalidFormat, "", ""},
		{"a repeat beats all", `{"data":1,"data":2}`, "", outcome.InvalidFormat, "", ""},
		{"other members may repeat", `{"serial":"a","data":{"x":1},"note":1,"note":2}`, "t", outcome.Stored, "a", ""},
		{"a number out of range", `{"serial":"a","data":{"x":1e400}}`, "t", outcome.InvalidData, "", ""},
		{"a number out of range, nested", `{"serial":"a","data":{"x":[1,{"y":-2E+999}]}}`, "t", outcome.InvalidData, "", ""},
		{"a number out of range outside data", `{"serial":"a","note":1e400,"data":{"x":1}}`, "t", outcome.Stored, "a", ""},
		{"large numbers within range", `{"serial":"a","data":{"x":1.7e308,"y":1e-400,"z":"1e400"}}`, "t", outcome.Stored, "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, code := parse([]byte(tc.body), tc.header)
			if code != tc.want {
				t.Fatalf("code = %v, want %v", code, tc.want)
			}
			if code == outcome.Stored && (r.Serial != tc.serial || r.BodyToken != tc.bodyToken) {
				t.Fatalf("serial, token = %q, %q", r.Serial, r.BodyToken)
			}
		})
	}
}

func TestParsePayloadDropsToken(t *testing.T) {
	r, code := parse([]byte(`{"serial":"a","accessToken":"s3cret","data":{"x":1},"extra":[1]}`), "")
	if code != outcome.Stored {
		t.Fatal(code)
	}
	if strings.Contains(string(r.Payload), "s3cret") || strings.Contains(string(r.Payload), "accessToken") {
		t.Fatalf("payload keeps the token: %s", r.Payload)
	}
	var back map[string]json.RawMessage
	if err := json.Unmarshal(r.Payload, &back); err != nil {
		t.Fatal(err)
	}
	if string(back["data"]) != `{"x":1}` || string(back["extra"]) != `[1]` || string(back["serial"]) != `"a"` {
		t.Fatalf("payload = %s", r.Payload)
	}
}

func TestBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc",
		"Basic abc": "", "Bearer": "", "Bearer ": "", "": "", "abc": "",
	} {
		if got := edge.Bearer(h); got != want {
			t.Errorf("bearer(%q) = %q, want %q", h, got, want)
		}
	}
}

// FuzzParse: any body yields a code of the table, a stored result only with a
// serial, an object for data, and a payload that is JSON without a token.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"serial":"a","data":{"x":1}}`, `{"serial":"a","accessToken":"t","data":{}}`, `[]`, `null`, `{`,
		`{"serial":1}`, `{"serial":"a","data":"x"}`, "\x00", `{"serial":"\u0000","data":{"":null}}`,
		`{"accessToken":{"a":1},"serial":"s","data":{"k":[true,false,"s",1e999]}}`,
	} {
		f.Add([]byte(s), "tok")
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		r, code := parse(body, header)
		if !outcome.Valid(code) {
			t.Fatalf("code %d is not in the table", code)
		}
		if code != outcome.Stored {
			return
		}
		if header == "" && r.BodyToken == "" {
			t.Fatalf("accepted without any token: %q", body)
		}
		var back map[string]json.RawMessage
		if err := json.Unmarshal(r.Payload, &back); err != nil {
			t.Fatalf("payload is not a JSON object: %v", err)
		}
		if data := back["data"]; r.Serial == "" || len(data) == 0 || data[0] != '{' {
			t.Fatalf("accepted without serial or object data: %q", body)
		}
		if _, has := back["accessToken"]; has {
			t.Fatalf("payload keeps accessToken: %s", r.Payload)
		}
	})
}

func TestKeyedEventID(t *testing.T) {
	a := KeyedEventID("dev-1", "5b0e7c52-1f3a-4d8e-9a44-0c6f2a1b7d90")
	if a != KeyedEventID("dev-1", "5b0e7c52-1f3a-4d8e-9a44-0c6f2a1b7d90") {
		t.Fatal("the same serial and key give different ids")
	}
	for _, other := range []string{
		KeyedEventID("dev-2", "5b0e7c52-1f3a-4d8e-9a44-0c6f2a1b7d90"),
		KeyedEventID("dev-1", "5b0e7c52-1f3a-4d8e-9a44-0c6f2a1b7d91"),
		KeyedEventID("dev-15b0e7c52", "-1f3a-4d8e-9a44-0c6f2a1b7d90"), // no ambiguity at the join
	} {
		if other == a {
			t.Fatalf("distinct (serial, key) pairs share id %s", a)
		}
	}
	if _, err := uuid.Parse(a); err != nil || len(a) != 36 {
		t.Fatalf("id %q is not a UUID: %v", a, err)
	}
}

// parseWithMaps is the straightforward reading of the body the scanner in
// parse replaced: decode into a map, decode its members again.
func parseWithMaps(body []byte, headerToken string) (request, outcome.Code) {
	body = bytes.TrimPrefix(body, []byte("\xEF\xBB\xBF"))
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil || namesReadTwice(body) {
		return request{}, outcome.InvalidFormat
	}
	var r request
	if raw, ok := fields["serial"]; !ok || json.Unmarshal(raw, &r.Serial) != nil || r.Serial == "" {
		return request{}, outcome.MissingSerial
	}
	if raw, ok := fields["accessToken"]; ok {
		_ = json.Unmarshal(raw, &r.BodyToken)
	}
	if headerToken == "" && r.BodyToken == "" {
		return request{}, outcome.MissingToken
	}
	var decoded any
	if data, ok := fields["data"]; !ok || len(data) == 0 || data[0] != '{' || json.Unmarshal(data, &decoded) != nil {
		return request{}, outcome.InvalidData
	}
	delete(fields, "accessToken")
	r.Payload, _ = json.Marshal(fields)
	return r, outcome.Stored
}

// namesReadTwice decodes the top-level names of the JSON object body one by
// one and reports whether a name the service reads comes twice.
func namesReadTwice(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		name := tok.(string)
		if seen[name] && slices.Contains([]string{"serial", "accessToken", "data", "ts", "messages"}, name) {
			return true
		}
		seen[name] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// FuzzParseAgreesWithMaps: the scanner decides every body as decoding into
// maps does, and keeps the same members in the payload.
func FuzzParseAgreesWithMaps(f *testing.F) {
	for _, s := range []string{
		`{"serial":"a","data":{"x":1}}`, `{"serial":"a","accessToken":"t","data":{}}`, `[]`, `null`, `{`, `{}`,
		`{"seri\u0061l":"a","data":{}}`, `{"serial":"a\"b","data":{"k":"}{"}, "serial":"c"}`, ` { "data" : { "a" : [ 1 , { } ] } , "serial" : "s" } `,
		`{"accessToken":{"a":1},"serial":"s","data":{"k":[true,false,"s",1e9]},"accessToken":"x"}`,
		"\xEF\xBB\xBF{\"serial\":\"a\",\"data\":{}}", `{"serial":"a","data":{"k":1e400}}`, `{"serial":"a","ts":1,"data":{},"ts":2}`,
	} {
		f.Add([]byte(s), "tok")
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, body []byte, header string) {
		got, code := parse(body, header)
		want, wantCode := parseWithMaps(body, header)
		if code != wantCode {
			t.Fatalf("code %v, maps say %v", code, wantCode)
		}
		if code != outcome.Stored {
			return
		}
		if got.Serial != want.Serial || got.BodyToken != want.BodyToken {
			t.Fatalf("serial, token %q %q; maps say %q %q", got.Serial, got.BodyToken, want.Serial, want.BodyToken)
		}
		var a, b map[string]any
		if json.Unmarshal(got.Payload, &a) != nil || json.Unmarshal(want.Payload, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("payload %s; maps say %s", got.Payload, want.Payload)
		}
	})
}
