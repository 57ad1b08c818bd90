package bus

import (
	"os"
	"testing"
)

// deploy/nats/auth.conf (for make run and compose) and its copy for
// Kubernetes (kustomize loads no file outside its directory) are what
// Users says for the default names:
// `UPDATE_AUTH_CONF=1 go test ./pkg/bus -run TestAuthConfIsGenerated`
// writes them.
func TestAuthConfIsGenerated(t *testing.T) {
	want := AuthConf(Users(DefaultNames))
	for _, path := range []string{"../../deploy/nats/auth.conf", "../../deploy/kubernetes/nats-auth.conf"} {
		if os.Getenv("UPDATE_AUTH_CONF") != "" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("%s differs from what pkg/bus/permissions.go generates: run with UPDATE_AUTH_CONF=1", path)
		}
	}
}
