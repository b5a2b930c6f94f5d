//go:build !windows

package config

import (
	"fmt"
	"os"
)

func defaultScope(func(string) string) Scope {
	if os.Geteuid() == 0 {
		return System
	}
	return User
}

func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("config: data directory: %w", err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("config: data directory %s is writable by other users (mode %v); use a directory of your own", dir, fi.Mode().Perm())
	}
	return nil
}
