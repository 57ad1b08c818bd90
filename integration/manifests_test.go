package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestManifests reads the deployment files as an operator would apply
// them: images tagged by version (never latest), no secret optional,
// every secret the manifests read created by the README's command, and
// NetworkPolicies that deny by default and name each program.
func TestManifests(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy/kubernetes/*.yaml"))
	files = append(files, filepath.Join(root, "docker-compose.yml"))
	var all strings.Builder
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		all.WriteString(read(rel))
	}
	text := all.String()
	if m := regexp.MustCompile(`(?m)(newTag:\s*"?latest|image:\s*\S+:latest\b|optional:\s*true)`).FindString(text); m != "" {
		t.Errorf("a manifest has %q", m)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllStringSubmatch(read("docker-compose.yml"), -1) {
		if !strings.Contains(m[1], ":") {
			t.Errorf("compose image %s has no version tag", m[1])
		}
	}
	var tags []string
	for _, m := range regexp.MustCompile(`newTag:\s*"?([^"\s}]+)`).FindAllStringSubmatch(read("deploy/kubernetes/kustomization.yaml"), -1) {
		tags = append(tags, m[1])
	}
	if len(tags) != 3 || !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(tags[0]) {
		t.Errorf("image tags %v, want three versions", tags)
	}
	created := read("deploy/kubernetes/README.md")
	keys := regexp.MustCompile(`secretKeyRef: \{ name: device-event-service, key: ([A-Z_]+)`).FindAllStringSubmatch(text, -1)
	if len(keys) < 8 {
		t.Fatalf("%d secret references", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(created, "--from-literal="+k[1]+"=") {
			t.Errorf("secret key %s is read but not created in deploy/kubernetes/README.md", k[1])
		}
	}
	// The workspace port has a Service of its own, inside the cluster, that
	// no policy opens; the public Service is the device port only.
	ingest := read("deploy/kubernetes/ingest-api.yaml")
	if !strings.Contains(ingest, "name: ingest-api-workspace\nspec:\n  type: ClusterIP") ||
		!strings.Contains(ingest, `{ name: WORKSPACE_ADDR, value: "0.0.0.0:8084" }`) ||
		!strings.Contains(ingest, "name: ingest-api\nspec:\n  selector: { app.kubernetes.io/name: ingest-api }\n  ports:\n    - { name: http, port: 80, targetPort: http }\n---") {
		t.Error("ingest-api.yaml: want the Service ingest-api on the device port only and a ClusterIP ingest-api-workspace")
	}
	if !strings.Contains(read("docker-compose.yml"), `"127.0.0.1:8084:8084"`) {
		t.Error("docker-compose.yml: want the workspace port published on loopback")
	}
	np := read("deploy/kubernetes/networkpolicies.yaml")
	if !strings.Contains(np, "name: default-deny\nspec:\n  podSelector: {}\n  policyTypes: [Ingress, Egress]") {
		t.Error("no default-deny policy for both directions")
	}
	var named []string
	for _, m := range regexp.MustCompile(`(?m)^  podSelector: \{ matchLabels: \{ app.kubernetes.io/name: ([a-z-]+) \} \}`).FindAllStringSubmatch(np, -1) {
		named = append(named, m[1])
	}
	slices.Sort(named)
	if !slices.Equal(named, []string{"ingest-api", "mapper-worker", "nats", "writer-worker"}) {
		t.Errorf("policies for %v", named)
	}
	if strings.Contains(np, "port: 8084") {
		t.Error("a policy opens the workspace port 8084: it is not exposed by default")
	}
	if !strings.Contains(read("deploy/kubernetes/kustomization.yaml"), "- networkpolicies.yaml") {
		t.Error("the policies are not applied")
	}
}
