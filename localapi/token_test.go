package localapi

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestLoadOrCreateToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tok, path, err := LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, TokenFileName) || len(tok) != 64 {
		t.Fatalf("token %q at %s", tok, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	again, _, err := LoadOrCreateToken(dir)
	if err != nil || again != tok {
		t.Errorf("second start: %q, %v; want the same token", again, err)
	}
	if other, _, _ := LoadOrCreateToken(t.TempDir()); other == tok {
		t.Error("two data directories got the same token")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestLoadOrCreateTokenRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    error
	}{
		{"readable by others", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 0o644, ErrTokenFileMode},
		{"readable by group", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 0o640, ErrTokenFileMode},
		{"empty", "", 0o600, ErrTokenFileInvalid},
		{"short", "abc\n", 0o600, ErrTokenFileInvalid},
		{"not hex", "zz23456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 0o600, ErrTokenFileInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if runtime.GOOS == "windows" && tt.want == ErrTokenFileMode {
				t.Skip("no Unix modes")
			}
			dir := t.TempDir()
			path := filepath.Join(dir, TokenFileName)
			if err := os.WriteFile(path, []byte(tt.content), tt.mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, tt.mode) // past the umask
			if _, _, err := LoadOrCreateToken(dir); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCheckListenAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr  string
		force bool
		ok    bool
	}{
		{"127.0.0.1:7419", false, true},
		{"127.0.0.53:7419", false, true},
		{"[::1]:7419", false, true},
		{"localhost:7419", false, true},
		{"LocalHost:0", false, true},
		{"0.0.0.0:7419", false, false},
		{":7419", false, false},
		{"[::]:7419", false, false},
		{"192.168.1.10:7419", false, false},
		{"example.com:7419", false, false},
		{"localhost.example.com:7419", false, false},
		{"0.0.0.0:7419", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:", false, false},
		{"127.0.0.1", true, false},
	}
	for _, tt := range tests {
		err := CheckListenAddr(tt.addr, tt.force)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListenAddr(%q, %v) = %v, want ok=%v", tt.addr, tt.force, err, tt.ok)
		}
	}
	if err := CheckListenAddr("0.0.0.0:7419", false); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("err = %v, want ErrNotLoopback", err)
	}
}
