package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/service"
)

// Exit codes of `syncd service status` (as LSB init scripts use them).
const (
	exitServiceStopped      = 3
	exitServiceNotInstalled = 4
)

const serviceUsage = `usage: syncd service <action> [--user] [--service-name NAME]

actions:
  install [--start=false] [run flags...]
            install syncd as a service that runs "syncd run" with the
            given run flags (see syncd run -h), and start it
  uninstall stop the service and remove it; the data directory is kept
  start, stop, restart
  status    print running, stopped or not installed
            (exit status 0, 3 and 4)

--user manages a per-user service (systemd user unit, launchd agent)
instead of a system service. --service-name (env SYNCD_SERVICE_NAME)
names the service, default "syncd".
`

// cmdService installs and controls syncd as an OS service.
func cmdService(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, serviceUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: service: no action given", errUsage)
		}
		return nil
	}
	action, args := args[0], args[1:]
	if action == "install" {
		return serviceInstall(args, stdout, stderr)
	}
	var act func(*service.Manager) error
	switch action {
	case "uninstall":
		act = (*service.Manager).Uninstall
	case "start":
		act = (*service.Manager).Start
	case "stop":
		act = (*service.Manager).Stop
	case "restart":
		act = (*service.Manager).Restart
	case "status":
	default:
		fmt.Fprint(stderr, serviceUsage)
		return fmt.Errorf("%w: service: unknown action %q", errUsage, action)
	}

	fs := newFlagSet("service "+action, "service "+action+" [--user] [--service-name NAME]", stderr)
	user := fs.Bool("user", false, "a per-user service instead of a system service")
	name := fs.String("service-name", cmp.Or(os.Getenv("SYNCD_SERVICE_NAME"), config.DefaultServiceName), "name of the service (env SYNCD_SERVICE_NAME)")
	if err := parseFlags(fs, args, "service "+action); err != nil {
		return err
	}
	if err := config.ValidServiceName(*name); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	m, err := service.New(service.Config{Name: *name, User: *user})
	if err != nil {
		return err
	}

	if action == "status" {
		st, err := m.Status()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, st)
		switch st {
		case service.Stopped:
			return &exitError{exitServiceStopped, fmt.Errorf("service %s is stopped; start it with: syncd service start%s", m.Name(), flagsHint(*name, *user))}
		case service.NotInstalled:
			return &exitError{exitServiceNotInstalled, fmt.Errorf("service %s is not installed; install it with: syncd service install%s", m.Name(), flagsHint(*name, *user))}
		}
		return nil
	}
	if err := act(m); err != nil {
		return err
	}
	st, err := m.Status()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "syncd: %s (%s): %s\n", m.Name(), m.Kind(), st)
	return nil
}

// serviceInstall installs the service with the run flags given, checked
// as `syncd run` would check them.
func serviceInstall(args []string, stdout, stderr io.Writer) error {
	fs, runFlags := config.NewFlagSet("service install", stderr)
	user := fs.Bool("user", false, "install a per-user service (systemd user unit, launchd agent) instead of a system service")
	start := fs.Bool("start", true, "start the service once installed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd service install [--user] [--start=false] [run flags...]")
		fmt.Fprintln(stderr, "\nThe installed service runs `syncd run` with the run flags given here.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "service install"); err != nil {
		return err
	}
	scope := config.System
	if *user {
		scope = config.User
	}
	// Check the settings as the service will see them: its environment
	// has no SYNCD_* variables of this shell.
	l, err := runFlags.Resolve(scope, withoutSyncdEnv(os.Getenv))
	if err != nil {
		return fmt.Errorf("%w: service install: %v", errUsage, err)
	}
	runArgs, err := runFlags.Args()
	if err != nil {
		return err
	}
	name := l.Settings.ServiceName
	if name != config.DefaultServiceName && !hasFlag(runArgs, "service-name") {
		runArgs = append(runArgs, "--service-name="+name)
	}
	writable, err := writablePaths(l.Settings)
	if err != nil {
		return err
	}
	m, err := service.New(service.Config{Name: name, User: *user, Arguments: append([]string{"run"}, runArgs...), WritablePaths: writable})
	if err != nil {
		return err
	}
	// The hardened system unit sees the file system read-only but for
	// the data directory, which must exist before it starts.
	if err := config.MkdirPrivate(l.Settings.DataDir); err != nil {
		return err
	}
	if err := m.Install(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "syncd: installed %s (%s): syncd run %s\n", name, m.Kind(), strings.Join(runArgs, " "))
	fmt.Fprintf(stdout, "syncd: data directory %s\n", l.Settings.DataDir)
	if l.Settings.Remote == "" {
		fmt.Fprintln(stderr, "syncd: warning: no --remote: the service syncs to the embedded reference server, which accepts any token; reinstall with --remote URL for real use")
	}
	if note := systemTokenNote(runtime.GOOS, *user, l.Settings.DataDir); note != "" {
		fmt.Fprintln(stderr, note)
	}
	if l.File != "" {
		fmt.Fprintf(stdout, "syncd: config file %s\n", l.File)
	}
	fmt.Fprintf(stdout, "syncd: logs: %s\n", m.Logs())
	if !*start {
		return nil
	}
	if err := m.Start(); err != nil {
		return err
	}
	st, err := m.Status()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "syncd: %s: %s\n", name, st)
	return nil
}

// writablePaths are the paths the service writes: the data directory,
// and the socket's directory when it is elsewhere.
func writablePaths(rc config.Settings) ([]string, error) {
	dir, err := filepath.Abs(rc.DataDir)
	if err != nil {
		return nil, err
	}
	paths := []string{dir}
	if rc.Socket != config.SocketOff && rc.Socket != "" {
		sd, err := filepath.Abs(filepath.Dir(rc.Socket))
		if err != nil {
			return nil, err
		}
		if rel, err := filepath.Rel(dir, sd); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			paths = append(paths, sd)
		}
	}
	return paths, nil
}

// systemTokenNote is what a system install on Linux or macOS says about
// the API token: the service runs as root, so its token (mode 0600) is
// root's, and desktop apps running as a user cannot read it. Empty for a
// per-user service and on Windows, where the system service is the only
// kind.
func systemTokenNote(goos string, user bool, dataDir string) string {
	if user || goos == "windows" {
		return ""
	}
	return fmt.Sprintf("syncd: note: the system service runs as root; its API token %s is readable by root only, so apps running as a user cannot talk to it. On a desktop, install syncd per user instead: syncd service install --user", filepath.Join(dataDir, localapi.TokenFileName))
}

// withoutSyncdEnv hides the SYNCD_* variables of getenv.
func withoutSyncdEnv(getenv func(string) string) func(string) string {
	return func(k string) string {
		if strings.HasPrefix(k, "SYNCD_") {
			return ""
		}
		return getenv(k)
	}
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// flagsHint repeats the flags that name a service other than the default.
func flagsHint(name string, user bool) string {
	var s string
	if user {
		s += " --user"
	}
	if name != config.DefaultServiceName {
		s += " --service-name " + name
	}
	return s
}
