package jsonobj

import (
	"bytes"
	"encoding/json"
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
