package jsonobj

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestMembers(t *testing.T) {
	obj := []byte(` { "a" : 1 , "b\u0041":{"x":[1,"]}"]}, "a":"two", "n":null } `)
	ms, ok := Members(obj, nil)
	if !ok || len(ms) != 4 {
		t.Fatalf("members %v ok %v", ms, ok)
	}
	want := []struct{ name, raw, value string }{
		{"a", `"a"`, `1`}, {"bA", `"b\u0041"`, `{"x":[1,"]}"]}`}, {"a", `"a"`, `"two"`}, {"n", `"n"`, `null`},
	}
	for i, w := range want {
		if ms[i].Name != w.name || string(ms[i].RawName) != w.raw || string(ms[i].Value) != w.value {
			t.Errorf("member %d = %q %s %s, want %q %s %s", i, ms[i].Name, ms[i].RawName, ms[i].Value, w.name, w.raw, w.value)
		}
	}
	if v := Value(obj, "a"); string(v) != `"two"` {
		t.Errorf("Value(a) = %s, want the last one", v)
	}
	if v := Value(obj, "zz"); v != nil {
		t.Errorf("Value(zz) = %s", v)
	}
	if !IsNull(Value(obj, "n")) || !IsNull(Value(obj, "zz")) || IsNull(Value(obj, "a")) {
		t.Error("IsNull")
	}
	for _, notObj := range []string{`[]`, `"x"`, `1`, ``, `  `} {
		if _, ok := Members([]byte(notObj), nil); ok {
			t.Errorf("Members(%q) ok", notObj)
		}
	}
	els := Elements([]byte(` [1, {"a":[2]} ,"x,y", null] `))
	if len(els) != 4 || string(els[1]) != `{"a":[2]}` || string(els[2]) != `"x,y"` || string(els[3]) != "null" {
		t.Errorf("elements %q", els)
	}
	if Elements([]byte(`{}`)) != nil || len(Elements([]byte(`[]`))) != 0 {
		t.Error("Elements of a non-array or an empty array")
	}
}

// FuzzMembers: nothing panics or loops, and on valid JSON the members and
// elements agree with encoding/json (the last of repeated names counts).
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2,{"c":"}"}],"a":null}`, `{"\u00e9":"\ud800","x":"\\"}`, `[1,[2],"3",{}]`, `{"a":}`, `[,]`, `{"a":1`, `["`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		ms, ok := Members(doc, nil)
		els := Elements(doc)
		if !json.Valid(doc) {
			return
		}
		var want map[string]json.RawMessage
		isObj := json.Unmarshal(doc, &want) == nil && bytes.TrimSpace(doc)[0] == '{'
		if ok != isObj {
			t.Fatalf("Members ok = %v, encoding/json object = %v", ok, isObj)
		}
		if isObj {
			got := map[string][]byte{}
			for _, m := range ms {
				got[m.Name] = m.Value
			}
			if len(got) != len(want) {
				t.Fatalf("%d names, encoding/json %d", len(got), len(want))
			}
			for name, v := range want {
				if !bytes.Equal(bytes.TrimSpace(got[name]), bytes.TrimSpace(v)) {
					t.Fatalf("%q = %s, encoding/json %s", name, got[name], v)
				}
			}
		}
		var arr []json.RawMessage
		if json.Unmarshal(doc, &arr) == nil && arr != nil {
			if len(els) != len(arr) {
				t.Fatalf("%d elements, encoding/json %d", len(els), len(arr))
			}
			for i := range arr {
				if !bytes.Equal(els[i], bytes.TrimSpace(arr[i])) {
					t.Fatalf("element %d = %s, encoding/json %s", i, els[i], arr[i])
				}
			}
		}
	})
}

func TestRepeats(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{`{"serial":"A","data":{},"x":1,"x":2}`, false}, // x is not read
		{`{"serial":"A","serial":"B"}`, true},
		{`{"serial":"A","seri\u0061l":"B"}`, true}, // the same name spelled with an escape
		{`{"data":{"data":1},"accessToken":"t"}`, false},
		{`{"accessToken":"t","data":{},"accessToken":"u"}`, true},
	} {
		ms, _ := Members([]byte(tc.doc), nil)
		if got := Repeats(ms, "serial", "accessToken", "data"); got != tc.want {
			t.Errorf("Repeats(%s) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

func TestFinite(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"a":1e400}`: false, `{"a":[1,{"b":-1E+400}]}`: false, `1e400`: false,
		`{"a":"1e400"}`: true, `{"1e400":1}`: true, `{"a":1e308,"b":1e-400,"c":true,"d":null}`: true,
		`{"a":` + strings.Repeat("9", 308) + `}`: true, `{"a":` + strings.Repeat("9", 309) + `}`: false,
		`{"a":0.` + strings.Repeat("0", 400) + `1}`: true, `{"a":"\"1e400"}`: true,
	} {
		if got := Finite([]byte(doc)); got != want {
			t.Errorf("Finite(%.60s) = %v, want %v", doc, got, want)
		}
	}
}

// FuzzFinite: on valid JSON, Finite agrees with encoding/json, which
// refuses a document holding a number out of float64's range.
func FuzzFinite(f *testing.F) {
	for _, s := range []string{`{"a":1e400}`, `[1,-2.5e-3,"1e999",{"e":1E308}]`, `true`, `{"a":[1e309]}`, `-0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got := Finite(doc)
		if !json.Valid(doc) {
			return
		}
		var v any
		if want := json.Unmarshal(doc, &v) == nil; got != want {
			t.Fatalf("Finite(%q) = %v, encoding/json decodes: %v", doc, got, want)
		}
	})
}
