package adminkeys

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/devicehub/eventservice/integration/testenv"
)

func TestRoles(t *testing.T) {
	for _, c := range []struct {
		have, need Role
		ok         bool
	}{
		{Viewer, Viewer, true}, {Viewer, Operator, false}, {Operator, Viewer, true}, {Operator, Admin, false},
		{Admin, Operator, true}, {"", Viewer, false}, {"root", Viewer, false}, {Admin, "", false},
	} {
		if got := c.have.Allows(c.need); got != c.ok {
			t.Errorf("%q allows %q = %v", c.have, c.need, got)
		}
	}
}

func open(t *testing.T, url string) *Store {
	t.Helper()
	js := testenv.OperatorJS(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, js, "reg", 1, "bootstrap-secret", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("not synced")
	}
	return s
}

func TestKeysAcrossCopies(t *testing.T) {
	ns := testenv.NATS(t)
	a, b := open(t, ns.ClientURL()), open(t, ns.ClientURL())
	ctx, now := context.Background(), time.Now()
	if id, ok := a.Authenticate("bootstrap-secret", now); !ok || id.Name != BootstrapName || id.Role != Admin {
		t.Fatalf("bootstrap: %+v %v", id, ok)
	}
	k, secret, err := a.Create(ctx, "ci-script", Operator, nil, "bootstrap", now)
	if err != nil || !strings.HasPrefix(secret, "dk_"+k.ID+"_") || k.Digest != nil {
		t.Fatalf("create: %+v %q %v", k, secret, err)
	}
	if _, _, err := b.Create(ctx, "ci-script", Viewer, nil, "bootstrap", now); !errors.Is(err, ErrConflict) {
		t.Fatalf("the same name on another copy: %v", err)
	}
	soon := now.Add(time.Minute)
	_, temp, _ := a.Create(ctx, "temp", Viewer, &soon, "ci-script", now)
	wait(t, func() bool { _, ok := b.Authenticate(secret, now); return ok })
	if id, ok := b.Authenticate(secret, now); !ok || id.Name != "ci-script" || id.Role != Operator {
		t.Fatalf("the other copy: %+v %v", id, ok)
	}
	for _, bad := range []string{"", secret + "x", secret[:len(secret)-1], "dk_" + k.ID + "_", "dk_nope_" + secret[16:], "bootstrap-secre"} {
		if _, ok := a.Authenticate(bad, now); ok {
			t.Fatalf("accepted %q", bad)
		}
	}
	wait(t, func() bool { _, ok := b.Authenticate(temp, now); return ok })
	if _, ok := b.Authenticate(temp, soon); ok {
		t.Fatal("an expired key was accepted")
	}
	if _, _, err := a.Create(ctx, "old", Viewer, &now, "x", now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an expiry in the past: %v", err)
	}
	if got := a.List(); len(got) != 2 || got[0].Name != "ci-script" || got[0].Digest != nil {
		t.Fatalf("list: %+v", got)
	}
	if _, err := b.Revoke(ctx, "ci-script"); err != nil {
		t.Fatal(err)
	}
	wait(t, func() bool { _, ok := a.Authenticate(secret, now); return !ok })
	if _, err := b.Revoke(ctx, "ci-script"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
}

func wait(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("not seen within 2 s")
		}
	}
}
