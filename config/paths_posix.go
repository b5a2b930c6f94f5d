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

func tighten(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("config: data directory: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, perm&0o700); err != nil {
			return fmt.Errorf("config: data directory: %w", err)
		}
	}
	return nil
}
