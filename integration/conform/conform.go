package conform

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Document is the part of an OpenAPI 3 document the checks read.
type Document struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Responses map[string]Response `json:"responses"`
		Schemas   map[string]*Schema  `json:"schemas"`
	} `json:"components"`
}

// Response is a documented response, or a reference to one.
type Response struct {
	Ref     string                             `json:"$ref"`
	Headers map[string]struct{ Required bool } `json:"headers"`
	Content map[string]struct {
		Schema *Schema `json:"schema"`
	} `json:"content"`
}

// Schema is the subset of JSON Schema the document uses.
type Schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Required             []string           `json:"required"`
	Properties           map[string]*Schema `json:"properties"`
	AdditionalProperties *bool              `json:"-"`
	Items                *Schema            `json:"items"`
	Enum                 []string           `json:"enum"`
	Nullable             bool               `json:"nullable"`
	OneOf                []*Schema          `json:"oneOf"`
}

// UnmarshalJSON reads additionalProperties only when it is a boolean.
func (s *Schema) UnmarshalJSON(b []byte) error {
	type plain Schema
	var raw struct {
		plain
		Additional json.RawMessage `json:"additionalProperties"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Schema(raw.plain)
	var v bool
	if json.Unmarshal(raw.Additional, &v) == nil {
		s.AdditionalProperties = &v
	}
	return nil
}

// Parse reads a document.
func Parse(doc []byte) (*Document, error) {
	var d Document
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	return &d, nil
}

// Operations lists "METHOD /path/{param}" for every documented operation.
func (d *Document) Operations() []string {
	var out []string
	for path, item := range d.Paths {
		for method := range item {
			if method == "parameters" {
				continue
			}
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// template finds the documented path that urlPath matches.
func (d *Document) template(urlPath string) (string, bool) {
	parts := strings.Split(urlPath, "/")
	for tmpl := range d.Paths {
		tp := strings.Split(tmpl, "/")
		if len(tp) != len(parts) {
			continue
		}
		ok := true
		for i := range tp {
			if !(strings.HasPrefix(tp[i], "{") && parts[i] != "") && tp[i] != parts[i] {
				ok = false
				break
			}
		}
		if ok {
			return tmpl, true
		}
	}
	return "", false
}

// Conform reports how an answer differs from what the document says the
// operation answers with that status: an undocumented status, a missing
// required header, or a body that does not match the schema.
func (d *Document) Conform(method, urlPath string, status int, header http.Header, body []byte) error {
	tmpl, ok := d.template(urlPath)
	if !ok {
		return fmt.Errorf("%s is not documented", urlPath)
	}
	var op struct {
		Responses map[string]Response `json:"responses"`
	}
	raw, ok := d.Paths[tmpl][strings.ToLower(method)]
	if !ok {
		return fmt.Errorf("%s %s is not documented", method, tmpl)
	}
	if err := json.Unmarshal(raw, &op); err != nil {
		return err
	}
	resp, ok := op.Responses[strconv.Itoa(status)]
	if !ok {
		return fmt.Errorf("%s %s: status %d is not documented", method, tmpl, status)
	}
	if name, isRef := strings.CutPrefix(resp.Ref, "#/components/responses/"); isRef {
		resp = d.Components.Responses[name]
	}
	for h, spec := range resp.Headers {
		if spec.Required && header.Get(h) == "" {
			return fmt.Errorf("%s %s %d: header %s missing", method, tmpl, status, h)
		}
	}
	media, ok := resp.Content["application/json"]
	if !ok {
		if len(body) != 0 {
			return fmt.Errorf("%s %s %d: documented without a body, got %q", method, tmpl, status, body)
		}
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s %s %d: body is not JSON: %v", method, tmpl, status, err)
	}
	if err := d.check(media.Schema, v, "body"); err != nil {
		return fmt.Errorf("%s %s %d: %w", method, tmpl, status, err)
	}
	return nil
}

func (d *Document) check(s *Schema, v any, at string) error {
	if s == nil {
		return nil
	}
	if name, isRef := strings.CutPrefix(s.Ref, "#/components/schemas/"); isRef {
		s = d.Components.Schemas[name]
		if s == nil {
			return fmt.Errorf("%s: unknown schema %s", at, name)
		}
	}
	if v == nil && s.Nullable {
		return nil
	}
	if len(s.OneOf) > 0 {
		var errs []string
		for _, alt := range s.OneOf {
			err := d.check(alt, v, at)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return fmt.Errorf("%s: matches none of oneOf: %s", at, strings.Join(errs, "; "))
	}
	switch s.Type {
	case "":
		return nil // any value
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", at, v)
		}
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				return fmt.Errorf("%s: required %q missing", at, r)
			}
		}
		for k, fv := range obj {
			ps, known := s.Properties[k]
			if !known {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					return fmt.Errorf("%s: undocumented field %q", at, k)
				}
				continue
			}
			if err := d.check(ps, fv, at+"."+k); err != nil {
				return err
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %T", at, v)
		}
		for i, e := range arr {
			if err := d.check(s.Items, e, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want a string, got %T", at, v)
		}
		if len(s.Enum) > 0 && !contains(s.Enum, str) {
			return fmt.Errorf("%s: %q is not one of %v", at, str, s.Enum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", at, v)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok || (s.Type == "integer" && f != float64(int64(f))) {
			return fmt.Errorf("%s: want an %s, got %v", at, s.Type, v)
		}
	default:
		return fmt.Errorf("%s: schema type %q not supported by this check", at, s.Type)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
