package service_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/syncd/syncd/service"
)

func TestStatusNotInstalled(t *testing.T) {
	t.Parallel()
	m, err := service.New(service.Config{Name: fmt.Sprintf("syncd-test-%d", rand.Int64())})
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Status()
	if err != nil || st != service.NotInstalled {
		t.Errorf("Status = %v, %v; want not installed", st, err)
	}
	if err := m.Start(); !errors.Is(err, service.ErrNotInstalled) && !errors.Is(err, service.ErrNeedRoot) {
		t.Errorf("Start = %v, want ErrNotInstalled (or ErrNeedRoot)", err)
	}
}

func TestUserServiceOnSysV(t *testing.T) {
	t.Parallel()
	m, err := service.New(service.Config{Name: "syncd-test-user", User: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Platform() != service.PlatformSysV {
		t.Skipf("the service manager here is %s, not SysV", m.Platform())
	}
	for name, op := range map[string]func() error{"Install": m.Install, "Uninstall": m.Uninstall, "Start": m.Start} {
		if err := op(); !errors.Is(err, service.ErrUserNotSupported) {
			t.Errorf("%s = %v, want ErrUserNotSupported", name, err)
		}
	}
	if _, err := m.Status(); !errors.Is(err, service.ErrUserNotSupported) {
		t.Errorf("Status = %v, want ErrUserNotSupported", err)
	}
}

func TestBadName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"../etc/passwd", "a b", "-x", "x/y"} {
		if _, err := service.New(service.Config{Name: name}); err == nil {
			t.Errorf("New(%q) succeeded", name)
		}
	}
}

func TestStatusString(t *testing.T) {
	t.Parallel()
	for st, want := range map[service.Status]string{service.Running: "running", service.Stopped: "stopped", service.NotInstalled: "not installed"} {
		if st.String() != want {
			t.Errorf("%d: %q, want %q", int(st), st.String(), want)
		}
	}
}

func TestShellWords(t *testing.T) {
	t.Parallel()
	if err := service.CheckShellWords([]string{"/usr/bin/syncd", "run", "--data-dir=/var/lib/syncd", "--listen=127.0.0.1:7419", "--remote=https://api.example.com/v1", "--allowed-origin=http://localhost:3000,http://x:1"}); err != nil {
		t.Errorf("plain words refused: %v", err)
	}
	for _, w := range []string{"--data-dir=/Library/Application Support/syncd", "$(reboot)", "a;b", `x"y`, "a'b", "*", ""} {
		if err := service.CheckShellWords([]string{w}); !errors.Is(err, service.ErrBadArgument) {
			t.Errorf("%q: err = %v, want ErrBadArgument", w, err)
		}
	}
}
