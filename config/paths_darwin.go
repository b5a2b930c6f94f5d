package config

import (
	"fmt"
	"path/filepath"
)

func defaultPaths(scope Scope, getenv func(string) string) (Paths, error) {
	var dir string
	switch scope {
	case System:
		dir = "/Library/Application Support/syncd"
	case User:
		h, err := home(getenv)
		if err != nil {
			return Paths{}, err
		}
		dir = filepath.Join(h, "Library", "Application Support", "syncd")
	default:
		return Paths{}, fmt.Errorf("%w: unknown scope %v", ErrNoDefaultDir, scope)
	}
	return Paths{DataDir: dir, ConfigFile: filepath.Join(dir, FileName)}, nil
}

// cacheDir is ~/Library/Caches.
func cacheDir(getenv func(string) string) (string, error) {
	h, err := home(getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(h, "Library", "Caches"), nil
}
