package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// createKey creates a key as the bootstrap admin and returns its secret.
func (s *stack) createKey(t *testing.T, name, role, expires string) string {
	t.Helper()
	body := `{"name":"` + name + `","role":"` + role + `"`
	if expires != "" {
		body += `,"expires":"` + expires + `"`
	}
	r := s.admin(t, http.MethodPost, "/keys", body+"}")
	secret, _ := r.Body["secret"].(string)
	if r.Status != 201 || !strings.HasPrefix(secret, "dk_") {
		t.Fatalf("create key %s: %d %s", name, r.Status, r.Raw)
	}
	return secret
}

func (s *stack) as(t *testing.T, secret, method, path, body string) reply {
	t.Helper()
	return s.doOn(t, s.ws, method, "/api/v1/admin"+path, []byte(body), map[string]string{"Authorization": "Bearer " + secret})
}

// TestWorkspaceRoles: every workspace route, called with a key of each
// role, answers 403 exactly when the role is below the one the OpenAPI
// document states for it (x-role), and never 403 otherwise.
func TestWorkspaceRoles(t *testing.T) {
	s := startStack(t)
	keys := map[string]string{}
	for _, role := range []string{"viewer", "operator", "admin"} {
		keys[role] = s.createKey(t, "loop-"+role, role, "")
	}
	rank := map[string]int{"viewer": 1, "operator": 2, "admin": 3}
	r := s.doOn(t, s.ws, http.MethodGet, "/api/v1/openapi.json", nil, nil)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{serial}", "roles-dev", "{name}", "no-such", "{entity}", "e", "{input}", "i", "{id}", "no-such")
	calls, forbidden := 0, 0
	for path, ops := range doc.Paths {
		rest, ok := strings.CutPrefix(path, "/api/v1/admin")
		if !ok {
			continue
		}
		for method, raw := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				Role string `json:"x-role"`
			}
			_ = json.Unmarshal(raw, &op)
			if rank[op.Role] == 0 {
				t.Fatalf("%s %s has no x-role", method, path)
			}
			for role, secret := range keys {
				got := s.as(t, secret, strings.ToUpper(method), fill.Replace(rest), `{}`)
				calls++
				switch {
				case rank[role] < rank[op.Role]:
					forbidden++
					if got.Status != 403 || got.Body["message"] != "Forbidden" || !strings.Contains(got.Body["error"].(string), "needs "+op.Role) {
						t.Errorf("%s %s as %s: %d %s, want 403", method, path, role, got.Status, got.Raw)
					}
				case got.Status == 403 || got.Status == 401:
					t.Errorf("%s %s as %s: %d %s", method, path, role, got.Status, got.Raw)
				}
			}
		}
	}
	// 24 operations x 3 roles; viewers are refused the 10 operator routes
	// and the 4 admin routes, operators the 4 admin routes.
	if calls != 72 || forbidden != 10+4+4 {
		t.Fatalf("%d calls, %d forbidden", calls, forbidden)
	}
	// A viewer sees devices without tokens.
	s.admin(t, http.MethodPut, "/devices/roles-dev", `{"inputs":[]}`)
	if r := s.as(t, keys["viewer"], http.MethodGet, "/devices/roles-dev", ""); r.Status != 200 || !strings.Contains(string(r.Raw), `"tokens":[{"name":"token-1"`) {
		t.Fatalf("viewer reads the device: %d %s", r.Status, r.Raw)
	}
}

// TestWorkspaceKeysAndAudit: named keys with roles and expiry, revoked
// keys refused, and every workspace change in the audit trail once, with
// the key's name, before and after without tokens, and the client address.
func TestWorkspaceKeysAndAudit(t *testing.T) {
	s := startStack(t)
	start := time.Now().UTC()
	op := s.createKey(t, "op-bob", "operator", "")
	adm := s.createKey(t, "root-carol", "admin", "")
	short := s.createKey(t, "short-lived", "viewer", time.Now().Add(1500*time.Millisecond).UTC().Format(time.RFC3339Nano))
	if r := s.as(t, op, http.MethodGet, "/whoami", ""); r.Status != 200 || r.Body["name"] != "op-bob" || r.Body["role"] != "operator" {
		t.Fatalf("whoami: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodPost, "/keys", `{"name":"op-bob","role":"viewer"}`); r.Status != 409 {
		t.Fatalf("a name twice: %d %s", r.Status, r.Raw)
	}
	if r := s.admin(t, http.MethodPost, "/keys", `{"name":"x","role":"root"}`); r.Status != 400 {
		t.Fatalf("an unknown role: %d %s", r.Status, r.Raw)
	}
	if r := s.as(t, short, http.MethodGet, "/whoami", ""); r.Status != 200 {
		t.Fatalf("short-lived key before it expires: %d", r.Status)
	}

	// The changes, by the operator.
	steps := []struct{ method, path, body string }{
		{http.MethodPut, "/devices/audit-dev", `{"inputs":[{"name":"t","entity":"au","entityInput":"t"}]}`},
		{http.MethodPut, "/devices/audit-dev", `{"inputs":[{"name":"t","entity":"au","entityInput":"temp"}]}`},
		{http.MethodPost, "/devices/audit-dev/tokens", `{}`},
		{http.MethodPost, "/devices/audit-dev/tokens/token-2/promote", ``},
		{http.MethodDelete, "/devices/audit-dev/tokens/token-1", ``},
		{http.MethodPost, "/devices/audit-dev/tokens/token-2/reveal", ``},
		{http.MethodPut, "/devices/audit-dev", `{"accessToken":"cutover-token-77","inputs":[]}`},
		{http.MethodDelete, "/devices/audit-dev", ``},
	}
	var secrets []string
	for _, st := range steps {
		r := s.as(t, op, st.method, st.path, st.body)
		if r.Status >= 300 {
			t.Fatalf("%s %s: %d %s", st.method, st.path, r.Status, r.Raw)
		}
		for _, k := range []string{"accessToken", "token"} {
			if v, ok := r.Body[k].(string); ok {
				secrets = append(secrets, v)
			}
		}
	}
	if len(secrets) != 4 { // created, added, revealed, cut over
		t.Fatalf("tokens shown: %d", len(secrets))
	}
	// And key changes, by the admin key.
	s.as(t, adm, http.MethodPost, "/keys", `{"name":"temp-key","role":"viewer"}`)
	if r := s.as(t, adm, http.MethodDelete, "/keys/temp-key", ""); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Raw)
	}
	if r := s.as(t, op, http.MethodDelete, "/keys/root-carol", ""); r.Status != 403 {
		t.Fatalf("an operator revoking a key: %d", r.Status)
	}
	if r := s.as(t, adm, http.MethodDelete, "/keys/op-bob", ""); r.Status != 200 {
		t.Fatalf("revoke op-bob: %d", r.Status)
	}
	if r := s.as(t, op, http.MethodGet, "/whoami", ""); r.Status != 401 {
		t.Fatalf("a revoked key: %d", r.Status)
	}
	time.Sleep(1600 * time.Millisecond)
	if r := s.as(t, short, http.MethodGet, "/whoami", ""); r.Status != 401 {
		t.Fatalf("an expired key: %d", r.Status)
	}

	r := s.as(t, adm, http.MethodGet, "/audit?actor=op-bob", "")
	recs, _ := r.Body["records"].([]any)
	var actions []string
	for _, x := range recs {
		m := x.(map[string]any)
		actions = append(actions, m["action"].(string))
		if m["target"] != "audit-dev" || m["source"] != "127.0.0.1" || m["role"] != "operator" {
			t.Errorf("record %v", m)
		}
	}
	want := "device.deleted,token.replaced,token.revealed,token.retired,token.promoted,token.added,device.updated,device.created"
	if got := strings.Join(actions, ","); got != want {
		t.Fatalf("op-bob's records %s, want %s", got, want)
	}
	for _, sec := range secrets {
		if strings.Contains(string(r.Raw), sec) {
			t.Fatalf("the audit trail holds a token: %s", r.Raw)
		}
	}
	if !strings.Contains(string(r.Raw), `"before":{"serial":"audit-dev"`) || !strings.Contains(string(r.Raw), `"entityInput":"temp"`) {
		t.Fatalf("before and after missing: %s", r.Raw)
	}
	// Keys' records, by whoever made them; filters and pages.
	r = s.as(t, adm, http.MethodGet, "/audit?action=key.", "")
	var keyActs []string
	for _, x := range r.Body["records"].([]any) {
		m := x.(map[string]any)
		keyActs = append(keyActs, m["actor"].(string)+":"+m["action"].(string)+":"+m["target"].(string))
	}
	if got := strings.Join(keyActs, ","); got != "root-carol:key.revoked:op-bob,root-carol:key.revoked:temp-key,root-carol:key.created:temp-key,"+
		"bootstrap:key.created:short-lived,bootstrap:key.created:root-carol,bootstrap:key.created:op-bob" {
		t.Fatalf("key records: %s", got)
	}
	if r := s.as(t, adm, http.MethodGet, "/audit?since="+time.Now().Add(time.Minute).UTC().Format(time.RFC3339), ""); r.Status != 200 || len(r.Body["records"].([]any)) != 0 {
		t.Fatalf("records since a minute from now: %s", r.Raw)
	}
	if r := s.as(t, adm, http.MethodGet, "/audit?actor=op-bob&since="+start.Format(time.RFC3339Nano), ""); len(r.Body["records"].([]any)) != 8 {
		t.Fatalf("op-bob's records since the test began: %s", r.Raw)
	}
	page := s.as(t, adm, http.MethodGet, "/audit?action=token.&limit=2", "")
	next, _ := page.Body["next"].(string)
	rest := s.as(t, adm, http.MethodGet, "/audit?action=token.&limit=10&before="+next, "")
	if len(page.Body["records"].([]any)) != 2 || next == "" || len(rest.Body["records"].([]any)) != 3 || rest.Body["next"] != nil {
		t.Fatalf("pages: %s / %s", page.Raw, rest.Raw)
	}
}
