//go:build !darwin && !windows

package config_test

import (
	"errors"
	"testing"

	"github.com/syncd/syncd/config"
)

func TestDefaultPathsLinux(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scope      config.Scope
		env        env
		data, conf string
	}{
		{config.System, env{"HOME": "/root"}, "/var/lib/syncd", "/etc/syncd/syncd.json"},
		{config.User, env{"HOME": "/home/a"}, "/home/a/.local/share/syncd", "/home/a/.config/syncd/syncd.json"},
		{config.User, env{"HOME": "/home/a", "XDG_DATA_HOME": "/x/data", "XDG_CONFIG_HOME": "/x/conf"}, "/x/data/syncd", "/x/conf/syncd/syncd.json"},
		{config.User, env{"HOME": "/home/a", "XDG_DATA_HOME": "relative"}, "/home/a/.local/share/syncd", "/home/a/.config/syncd/syncd.json"},
	}
	for _, tt := range tests {
		p, err := config.DefaultPaths(tt.scope, tt.env.get)
		if err != nil {
			t.Fatal(err)
		}
		if p.DataDir != tt.data || p.ConfigFile != tt.conf {
			t.Errorf("%v %v: got %+v, want %s and %s", tt.scope, tt.env, p, tt.data, tt.conf)
		}
	}
	if _, err := config.DefaultPaths(config.Scope(9), env{}.get); !errors.Is(err, config.ErrNoDefaultDir) {
		t.Errorf("unknown scope: err = %v", err)
	}
}
