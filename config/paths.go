package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// Scope says whose syncd this is: the machine's (a system service, data
// under /var/lib) or one user's (a user service or a foreground run,
// data in the user's home).
type Scope int

const (
	// System is the machine-wide scope.
	System Scope = iota + 1
	// User is the current user's scope.
	User
)

func (s Scope) String() string {
	switch s {
	case System:
		return "system"
	case User:
		return "user"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Paths are the default locations of one scope.
type Paths struct {
	// DataDir is the default data directory.
	DataDir string
	// ConfigFile is the config file read when it exists and no other is
	// named.
	ConfigFile string
}

// DefaultScope is the scope of this process: System when it runs as root
// (or as LocalSystem on Windows), User otherwise.
func DefaultScope() Scope { return defaultScope(os.Getenv) }

// DefaultPaths are the default locations of scope on this OS:
//
//	Linux (and other Unix), system: /var/lib/syncd, /etc/syncd/syncd.json
//	Linux, user: $XDG_DATA_HOME/syncd (~/.local/share/syncd),
//	             $XDG_CONFIG_HOME/syncd/syncd.json (~/.config/syncd/syncd.json)
//	macOS, system: /Library/Application Support/syncd (config file inside)
//	macOS, user: ~/Library/Application Support/syncd (config file inside)
//	Windows, system: %ProgramData%\syncd (config file inside)
//	Windows, user: %LocalAppData%\syncd (config file inside)
//
// getenv reads the environment (nil: os.Getenv). It fails with
// ErrNoDefaultDir when a variable or home directory it needs is missing.
func DefaultPaths(scope Scope, getenv func(string) string) (Paths, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return defaultPaths(scope, getenv)
}

// home is $HOME, else the OS's idea of the home directory.
func home(getenv func(string) string) (string, error) {
	if h := getenv("HOME"); h != "" {
		return h, nil
	}
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		return "", fmt.Errorf("%w: no home directory", ErrNoDefaultDir)
	}
	return h, nil
}

// MkdirPrivate creates dir and its missing parents with mode 0700 (the
// data directory holds the API token). An existing directory is left as
// it is, unless other users may write to it (/tmp, a shared folder):
// then it is refused on Unix, since they could swap the token or the
// data file. It is never chmodded: it may be someone's home.
func MkdirPrivate(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return checkPrivate(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("config: data directory: %w", err)
	}
	return nil
}

// RunningDir is the per-user directory where each running syncd leaves a
// note of its data directory and addresses, so that the client commands
// of the same user find it whatever --data-dir it was started with:
// $XDG_RUNTIME_DIR/syncd when that is set (a tmpfs emptied at logout),
// else the user's cache directory's syncd/running (~/.cache on Linux,
// ~/Library/Caches on macOS, %LocalAppData% on Windows).
func RunningDir(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "syncd"), nil
	}
	base, err := cacheDir(getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "syncd", "running"), nil
}
