//go:build !darwin && !windows

package config

import (
	"fmt"
	"path/filepath"
)

func defaultPaths(scope Scope, getenv func(string) string) (Paths, error) {
	switch scope {
	case System:
		return Paths{DataDir: "/var/lib/syncd", ConfigFile: "/etc/syncd/" + FileName}, nil
	case User:
		data, conf := getenv("XDG_DATA_HOME"), getenv("XDG_CONFIG_HOME")
		// The XDG spec: a relative path is invalid and to be ignored.
		if data == "" || !filepath.IsAbs(data) || conf == "" || !filepath.IsAbs(conf) {
			h, err := home(getenv)
			if err != nil {
				return Paths{}, err
			}
			if data == "" || !filepath.IsAbs(data) {
				data = filepath.Join(h, ".local", "share")
			}
			if conf == "" || !filepath.IsAbs(conf) {
				conf = filepath.Join(h, ".config")
			}
		}
		return Paths{DataDir: filepath.Join(data, "syncd"), ConfigFile: filepath.Join(conf, "syncd", FileName)}, nil
	}
	return Paths{}, fmt.Errorf("%w: unknown scope %v", ErrNoDefaultDir, scope)
}

// cacheDir is $XDG_CACHE_HOME, else ~/.cache.
func cacheDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		return d, nil
	}
	h, err := home(getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(h, ".cache"), nil
}
