package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// defaultScope is System for a process running as LocalSystem (a
// service), whose profile is ...\system32\config\systemprofile.
func defaultScope(getenv func(string) string) Scope {
	if strings.Contains(strings.ToLower(getenv("USERPROFILE")), `\systemprofile`) {
		return System
	}
	return User
}

func defaultPaths(scope Scope, getenv func(string) string) (Paths, error) {
	var base string
	switch scope {
	case System:
		base = getenv("ProgramData")
		if base == "" {
			return Paths{}, fmt.Errorf("%w: %%ProgramData%% is not set", ErrNoDefaultDir)
		}
	case User:
		base = getenv("LocalAppData")
		if base == "" {
			return Paths{}, fmt.Errorf("%w: %%LocalAppData%% is not set", ErrNoDefaultDir)
		}
	default:
		return Paths{}, fmt.Errorf("%w: unknown scope %v", ErrNoDefaultDir, scope)
	}
	dir := filepath.Join(base, "syncd")
	return Paths{DataDir: dir, ConfigFile: filepath.Join(dir, FileName)}, nil
}

// tighten does nothing on Windows: a directory under the user's
// LocalAppData or ProgramData inherits that folder's ACL.
func checkPrivate(string) error { return nil }

// cacheDir is %LocalAppData%.
func cacheDir(getenv func(string) string) (string, error) {
	if d := getenv("LocalAppData"); d != "" {
		return d, nil
	}
	return "", fmt.Errorf("%w: %%LocalAppData%% is not set", ErrNoDefaultDir)
}
