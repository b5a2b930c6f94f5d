package service

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"runtime"
	"strings"

	ks "github.com/kardianos/service"
)

// Defaults of Config.
const (
	DefaultName        = "syncd"
	DefaultDisplayName = "syncd"
	DefaultDescription = "syncd: local-first sync daemon"
)

// Platform names of the service managers kardianos/service drives that
// this package treats specially.
const (
	PlatformSystemd = "linux-systemd"
	PlatformSysV    = "unix-systemv"
	PlatformLaunchd = "darwin-launchd"
)

// Config describes one service.
type Config struct {
	// Name is the service's name: the unit, init script, launchd label
	// or Windows service name. Default DefaultName.
	Name string
	// DisplayName and Description are shown by the service manager.
	DisplayName string
	Description string
	// User installs and controls a per-user service (systemd --user, a
	// launchd agent) instead of a system service.
	User bool
	// Executable is the program the service runs. Default: this
	// executable (os.Executable).
	Executable string
	// Arguments are the program's arguments, e.g. ["run", "--data-dir=..."].
	Arguments []string
	// WritablePaths are what a hardened system unit may write (systemd:
	// ReadWritePaths): the data directory, and the socket's directory
	// when it is elsewhere. Everything else is read-only to it.
	WritablePaths []string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Status is what Manager.Status reports.
type Status int

const (
	// NotInstalled: the service manager does not know the service.
	NotInstalled Status = iota
	// Stopped: installed, not running.
	Stopped
	// Running: installed and running.
	Running
)

func (s Status) String() string {
	switch s {
	case NotInstalled:
		return "not installed"
	case Stopped:
		return "stopped"
	case Running:
		return "running"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Manager installs and controls one service.
type Manager struct {
	cfg    Config
	svc    ks.Service
	logger *slog.Logger
}

// nameRE is what a service name may be: it becomes file names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// New returns the Manager of the service cfg describes, on this
// machine's service manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if !nameRE.MatchString(cfg.Name) {
		return nil, fmt.Errorf("service: name %q: want letters, digits, '.', '_' and '-'", cfg.Name)
	}
	if cfg.DisplayName == "" {
		cfg.DisplayName = DefaultDisplayName
		if cfg.Name != DefaultName {
			cfg.DisplayName += " (" + cfg.Name + ")"
		}
	}
	if cfg.Description == "" {
		cfg.Description = DefaultDescription
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("service: executable: %w", err)
		}
		cfg.Executable = exe
	}
	m := &Manager{cfg: cfg, logger: cfg.Logger}
	if m.logger == nil {
		m.logger = slog.Default()
	}
	kc := &ks.Config{
		Name:        cfg.Name,
		DisplayName: cfg.DisplayName,
		Description: cfg.Description,
		Executable:  cfg.Executable,
		Arguments:   cfg.Arguments,
		Option: ks.KeyValue{
			"UserService": cfg.User,
			"RunAtLoad":   true,
		},
	}
	// The service files are this package's (units.go), not
	// kardianos/service's: a user unit wanted by default.target, a
	// hardened system unit, restarts within seconds.
	u := Unit{
		Name: cfg.Name, Description: cfg.Description, User: cfg.User,
		Executable: cfg.Executable, Arguments: cfg.Arguments, WritablePaths: cfg.WritablePaths,
	}
	switch ks.Platform() {
	case PlatformSystemd:
		unit, err := SystemdUnit(u)
		if err != nil {
			return nil, err
		}
		kc.Option["SystemdScript"] = unit
	case PlatformLaunchd:
		u.LogDirectory = "/var/log"
		if cfg.User {
			// launchd writes a user agent's stdout and stderr to
			// ~/NAME.{out,err}.log unless told otherwise.
			if home, err := os.UserHomeDir(); err == nil {
				u.LogDirectory = home + "/Library/Logs"
			}
		}
		plist, err := LaunchdPlist(u)
		if err != nil {
			return nil, err
		}
		kc.Option["LaunchdConfig"] = plist
	case "windows-service":
		maps.Copy(kc.Option, WindowsOptions())
	}
	svc, err := ks.New(nopProgram{}, kc)
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	m.svc = svc
	return m, nil
}

// nopProgram is the kardianos Interface of a Manager, which only
// controls the service and never runs it.
type nopProgram struct{}

func (nopProgram) Start(ks.Service) error { return nil }
func (nopProgram) Stop(ks.Service) error  { return nil }

// Platform names the service manager: linux-systemd, unix-systemv,
// darwin-launchd, windows-service, ...
func (m *Manager) Platform() string { return m.svc.Platform() }

// Name is the service's name.
func (m *Manager) Name() string { return m.cfg.Name }

// Kind describes the service for people: "unix-systemv system service".
func (m *Manager) Kind() string {
	if m.cfg.User {
		return m.Platform() + " user service"
	}
	return m.Platform() + " system service"
}

// supportsUser reports whether the platform has per-user services.
func supportsUser(platform string) bool {
	return platform == PlatformSystemd || platform == PlatformLaunchd
}

// check refuses what this platform and user cannot do: a user service
// where there are none, a system service change without root.
func (m *Manager) check() error {
	if m.cfg.User {
		if !supportsUser(m.Platform()) {
			return fmt.Errorf("%w: %s has no per-user services; install a system service (as root, without --user)", ErrUserNotSupported, m.Platform())
		}
		return nil
	}
	if runtime.GOOS != "windows" && os.Geteuid() != 0 {
		return fmt.Errorf("%w: run as root (sudo), or use --user for a per-user service", ErrNeedRoot)
	}
	return nil
}

// Status reports whether the service is running, stopped or not
// installed. A service the manager reports as failed is stopped.
func (m *Manager) Status() (Status, error) {
	if m.cfg.User && !supportsUser(m.Platform()) {
		return NotInstalled, fmt.Errorf("%w: %s has no per-user services", ErrUserNotSupported, m.Platform())
	}
	if m.Platform() == PlatformSysV {
		return m.sysvStatus()
	}
	st, err := m.svc.Status()
	switch {
	case err == nil && st == ks.StatusRunning:
		return Running, nil
	case err == nil && st == ks.StatusStopped:
		return Stopped, nil
	case errors.Is(err, ks.ErrNotInstalled):
		return NotInstalled, nil
	case err != nil && strings.Contains(err.Error(), "failed state"):
		return Stopped, nil // systemd: a unit that failed is not running
	case err != nil:
		return NotInstalled, fmt.Errorf("service: status of %s: %w", m.cfg.Name, err)
	}
	return NotInstalled, fmt.Errorf("service: status of %s: unknown", m.cfg.Name)
}

// Install registers the service with the service manager so it starts at
// boot (system) or login (user). It does not start it.
func (m *Manager) Install() error {
	if err := m.check(); err != nil {
		return err
	}
	if m.Platform() == PlatformSysV {
		if err := checkShellWords(append([]string{m.cfg.Executable}, m.cfg.Arguments...)); err != nil {
			return err
		}
	}
	st, err := m.Status()
	if err != nil {
		return err
	}
	if st != NotInstalled {
		return fmt.Errorf("%w: %s (uninstall it first)", ErrInstalled, m.cfg.Name)
	}
	if err := m.svc.Install(); err != nil {
		// Take back whatever the failed install left.
		_ = m.svc.Uninstall()
		m.removeLeftovers()
		return fmt.Errorf("service: install %s: %w", m.cfg.Name, err)
	}
	return nil
}

// Uninstall stops the service if it runs, removes it from the service
// manager, and removes the files the install and the service manager's
// scripts created (on SysV: the /etc/rc?.d links, the pid file and the
// log files). The data directory is left alone. Uninstall of a service
// that is not installed still removes such leftovers, then returns
// ErrNotInstalled.
func (m *Manager) Uninstall() error {
	if err := m.check(); err != nil {
		return err
	}
	st, err := m.Status()
	if err != nil {
		return err
	}
	if st == NotInstalled {
		m.removeLeftovers()
		return fmt.Errorf("%w: %s", ErrNotInstalled, m.cfg.Name)
	}
	if st == Running {
		if err := m.svc.Stop(); err != nil {
			return fmt.Errorf("service: stop %s before uninstalling: %w", m.cfg.Name, err)
		}
	}
	if err := m.svc.Uninstall(); err != nil {
		return fmt.Errorf("service: uninstall %s: %w", m.cfg.Name, err)
	}
	m.removeLeftovers()
	return nil
}

// Start starts the installed service; a running one is left alone.
func (m *Manager) Start() error {
	st, err := m.installed()
	if err != nil || st == Running {
		return err
	}
	if err := m.svc.Start(); err != nil {
		return fmt.Errorf("service: start %s: %w", m.cfg.Name, err)
	}
	return nil
}

// Stop stops the service; a stopped one is left alone. The service
// manager waits for syncd's graceful stop (on SysV, 10 seconds).
func (m *Manager) Stop() error {
	st, err := m.installed()
	if err != nil || st == Stopped {
		return err
	}
	if err := m.svc.Stop(); err != nil {
		return fmt.Errorf("service: stop %s: %w", m.cfg.Name, err)
	}
	return nil
}

// Restart stops the service if it runs and starts it.
func (m *Manager) Restart() error {
	st, err := m.installed()
	if err != nil {
		return err
	}
	if st == Running {
		if err := m.svc.Stop(); err != nil {
			return fmt.Errorf("service: stop %s: %w", m.cfg.Name, err)
		}
	}
	if err := m.svc.Start(); err != nil {
		return fmt.Errorf("service: start %s: %w", m.cfg.Name, err)
	}
	return nil
}

// installed checks the caller may control the service and that it is
// installed, and returns its status.
func (m *Manager) installed() (Status, error) {
	if err := m.check(); err != nil {
		return NotInstalled, err
	}
	st, err := m.Status()
	if err != nil {
		return st, err
	}
	if st == NotInstalled {
		return st, fmt.Errorf("%w: %s", ErrNotInstalled, m.cfg.Name)
	}
	return st, nil
}

// Logs tells where the service's log lines go on this platform.
func (m *Manager) Logs() string {
	name := m.cfg.Name
	switch m.Platform() {
	case PlatformSystemd:
		if m.cfg.User {
			return "journalctl --user -u " + name
		}
		return "journalctl -u " + name
	case PlatformSysV:
		return sysvLogFile(name, "err") + " (log lines; stdout goes to " + sysvLogFile(name, "log") + ")"
	case PlatformLaunchd:
		dir := "/var/log"
		if m.cfg.User {
			dir = "~/Library/Logs"
		}
		return dir + "/" + name + ".err.log (log lines; stdout goes to " + dir + "/" + name + ".out.log)"
	case "windows-service":
		return LogFileName + " in the data directory"
	}
	return "stderr of the service process, as " + m.Platform() + " keeps it"
}

// removeLeftovers removes what kardianos/service's uninstall leaves.
func (m *Manager) removeLeftovers() {
	var files []string
	switch m.Platform() {
	case PlatformSysV:
		files = sysvLeftovers(m.cfg.Name)
	case PlatformLaunchd:
		if !m.cfg.User {
			files = []string{"/var/log/" + m.cfg.Name + ".out.log", "/var/log/" + m.cfg.Name + ".err.log"}
		} else if home, err := os.UserHomeDir(); err == nil {
			files = []string{home + "/Library/Logs/" + m.cfg.Name + ".out.log", home + "/Library/Logs/" + m.cfg.Name + ".err.log"}
		}
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.logger.Warn("service: could not remove a leftover file", "file", f, "err", err)
		}
	}
}

// shellWordRE is what the SysV init script can carry: it pastes the
// command line into a shell variable and expands it unquoted.
var shellWordRE = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func checkShellWords(words []string) error {
	for _, w := range words {
		if !shellWordRE.MatchString(w) {
			return fmt.Errorf("%w: %q: the SysV init script runs the command through the shell unquoted; use only letters, digits and _@%%+=:,./- (put other values in the config file)", ErrBadArgument, w)
		}
	}
	return nil
}
