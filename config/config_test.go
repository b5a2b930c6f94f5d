package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi"
)

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// load resolves args in the user scope with a fake home under dir.
func load(t *testing.T, args []string, e env) (config.Loaded, error) {
	t.Helper()
	fs, f := config.NewFlagSet("run", nil)
	if err := fs.Parse(args); err != nil {
		return config.Loaded{}, err
	}
	return f.Resolve(config.User, e.get)
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeFile(t, dir, "syncd.json", `{
  "listen": "127.0.0.1:1001",
  "concurrency": 2,
  "requestTimeout": "11s",
  "logLevel": "debug",
  "allowedOrigins": ["http://file:1"],
  "entityTypes": ["note"]
}`)
	base := env{"HOME": dir}
	tests := []struct {
		name string
		env  env
		args []string
		want func(s config.Settings) bool
	}{
		{"defaults", env{}, nil, func(s config.Settings) bool {
			return s.Listen == "127.0.0.1:7419" && s.Concurrency == 4 && s.LogLevel == "info" && s.RequestTimeout == 30*time.Second
		}},
		{"file over defaults", env{config.EnvConfig: file}, nil, func(s config.Settings) bool {
			return s.Listen == "127.0.0.1:1001" && s.Concurrency == 2 && s.RequestTimeout == 11*time.Second &&
				s.LogLevel == "debug" && slices.Equal(s.AllowedOrigins, []string{"http://file:1"})
		}},
		{"env over file", env{config.EnvConfig: file, "SYNCD_LISTEN": "127.0.0.1:1002", "SYNCD_REQUEST_TIMEOUT": "12s", "SYNCD_ALLOWED_ORIGINS": "http://env:1,http://env:2"}, nil, func(s config.Settings) bool {
			return s.Listen == "127.0.0.1:1002" && s.RequestTimeout == 12*time.Second && s.Concurrency == 2 &&
				slices.Equal(s.AllowedOrigins, []string{"http://env:1", "http://env:2"})
		}},
		{"flags over env", env{config.EnvConfig: file, "SYNCD_LISTEN": "127.0.0.1:1002", "SYNCD_CONCURRENCY": "3", "SYNCD_ALLOWED_ORIGINS": "http://env:1"},
			[]string{"--listen", "127.0.0.1:1003", "--allowed-origin", "http://flag:1", "--allowed-origin=http://flag:2"}, func(s config.Settings) bool {
				return s.Listen == "127.0.0.1:1003" && s.Concurrency == 3 && s.LogLevel == "debug" &&
					slices.Equal(s.AllowedOrigins, []string{"http://flag:1", "http://flag:2"}) && slices.Equal(s.EntityTypes, []string{"note"})
			}},
		{"--config over SYNCD_CONFIG", env{config.EnvConfig: "/nonexistent.json"}, []string{"--config", file}, func(s config.Settings) bool {
			return s.Listen == "127.0.0.1:1001"
		}},
		{"allowed hosts", env{"SYNCD_ALLOWED_HOSTS": "box.lan,192.168.1.10"}, []string{"--allowed-host", "fe80::1", "--allowed-host=Box2.lan"}, func(s config.Settings) bool {
			return slices.Equal(s.AllowedHosts, []string{"fe80::1", "Box2.lan"})
		}},
		{"bool flag", env{"SYNCD_FORCE_LISTEN": "false"}, []string{"--force-listen", "--listen", "0.0.0.0:1004"}, func(s config.Settings) bool {
			return s.ForceListen && s.Listen == "0.0.0.0:1004"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env{}
			for k, v := range base {
				e[k] = v
			}
			for k, v := range tt.env {
				e[k] = v
			}
			l, err := load(t, tt.args, e)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(l.Settings) {
				t.Errorf("settings: %+v", l.Settings)
			}
		})
	}
}

func TestDefaultConfigFile(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	e := env{"HOME": home}
	l, err := load(t, nil, e)
	if err != nil {
		t.Fatal(err)
	}
	if l.File != "" {
		t.Errorf("File = %q with no config file", l.File)
	}
	p, err := config.DefaultPaths(config.User, e.get)
	if err != nil {
		t.Fatal(err)
	}
	if l.Settings.DataDir != p.DataDir {
		t.Errorf("DataDir = %q, want %q", l.Settings.DataDir, p.DataDir)
	}
	if err := os.MkdirAll(filepath.Dir(p.ConfigFile), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(p.ConfigFile), filepath.Base(p.ConfigFile), `{"concurrency": 9}`)
	l, err = load(t, nil, e)
	if err != nil {
		t.Fatal(err)
	}
	if l.File != p.ConfigFile || l.Settings.Concurrency != 9 {
		t.Errorf("File = %q, Concurrency = %d; want %q, 9", l.File, l.Settings.Concurrency, p.ConfigFile)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name    string
		file    string // config file text, if any
		env     env
		args    []string
		is      error
		mention string
	}{
		{"unknown key", `{"listen": "127.0.0.1:1", "concurency": 3}`, nil, nil, config.ErrUnknownKey, `"concurency"`},
		{"bad duration in file", `{"requestTimeout": "soon"}`, nil, nil, config.ErrInvalid, "requestTimeout"},
		{"duration as number", `{"requestTimeout": 30}`, nil, nil, config.ErrInvalid, `want a duration string`},
		{"wrong type", `{"concurrency": "4"}`, nil, nil, config.ErrInvalid, "concurrency"},
		{"not an object", `[1]`, nil, nil, config.ErrInvalid, "not a JSON object"},
		{"bad duration in env", "", env{"SYNCD_DONE_RETENTION": "a day"}, nil, config.ErrInvalid, "SYNCD_DONE_RETENTION"},
		{"bad int in env", "", env{"SYNCD_CONCURRENCY": "many"}, nil, config.ErrInvalid, "SYNCD_CONCURRENCY"},
		{"non-loopback listen", "", nil, []string{"--listen", "0.0.0.0:7419"}, config.ErrInvalid, "listen"},
		{"zero concurrency", "", env{"SYNCD_CONCURRENCY": "0"}, nil, config.ErrInvalid, "concurrency"},
		{"bad remote", "", nil, []string{"--remote", "ftp://x"}, config.ErrInvalid, "remote"},
		{"bad origin", "", nil, []string{"--allowed-origin", "http://x/"}, config.ErrInvalid, "origin"},
		{"host with a port", "", nil, []string{"--allowed-host", "box.lan:7419"}, config.ErrInvalid, "allowedHosts"},
		{"wildcard host", `{"allowedHosts": ["*.lan"]}`, nil, nil, config.ErrInvalid, "allowedHosts"},
		{"bad log format", "", nil, []string{"--log-format", "xml"}, config.ErrInvalid, "logFormat"},
		{"bad service name", "", nil, []string{"--service-name", "../x"}, config.ErrInvalid, "service name"},
		{"bad ui", `{"ui": "false"}`, nil, nil, config.ErrInvalid, `ui "false": want on or off`},
		{"bad ui in env", "", env{"SYNCD_UI": "no"}, nil, config.ErrInvalid, "want on or off"},
		{"missing --config", "", nil, []string{"--config", filepath.Join(dir, "none.json")}, config.ErrNoConfigFile, "none.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env{"HOME": t.TempDir()}
			for k, v := range tt.env {
				e[k] = v
			}
			if tt.file != "" {
				e[config.EnvConfig] = writeFile(t, t.TempDir(), "c.json", tt.file)
			}
			_, err := load(t, tt.args, e)
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("err = %q, want it to mention %q", err, tt.mention)
			}
		})
	}
}

func TestBadFlag(t *testing.T) {
	t.Parallel()
	_, err := config.Load([]string{"--request-timeout", "soon"}, env{"HOME": t.TempDir()}.get, nil)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "request-timeout") {
		t.Errorf("err = %v", err)
	}
	_, err = config.Load([]string{"stray"}, env{"HOME": t.TempDir()}.get, nil)
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("stray argument: err = %v", err)
	}
	_, err = config.Load([]string{"-h"}, env{"HOME": t.TempDir()}.get, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err = %v", err)
	}
}

func TestPrintConfig(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	const token = "tok-5ecret-api-token"
	writeFile(t, dataDir, "api-token", token+"\n")
	// Credentials in the remote URL are refused, and the refusal does
	// not repeat them (it is logged).
	_, err := load(t, []string{"--data-dir", dataDir, "--remote", "https://alice:hunter2@api.example.com/app?key=s3cr3t", "--print-config"}, env{"HOME": t.TempDir()})
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("remote with credentials: err = %v", err)
	}
	for _, secret := range []string{"hunter2", "alice", "s3cr3t"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the refusal shows %q: %v", secret, err)
		}
	}
	l, err := load(t, []string{"--data-dir", dataDir, "--remote", "https://api.example.com/app", "--print-config"}, env{"HOME": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !l.PrintConfig {
		t.Error("PrintConfig not set")
	}
	var b bytes.Buffer
	if err := config.WriteJSON(&b, l.Settings); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, secret := range []string{token, "hunter2", "alice", "s3cr3t"} {
		if strings.Contains(out, secret) {
			t.Errorf("--print-config shows %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, `"remote": "https://api.example.com/app"`) {
		t.Errorf("remote not shown:\n%s", out)
	}
	if !strings.Contains(out, `"requestTimeout": "30s"`) {
		t.Errorf("durations not as strings:\n%s", out)
	}

	// The output is a valid config file giving the same settings (but
	// for the redacted remote).
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	delete(m, "remote")
	again, _ := json.Marshal(m)
	file := writeFile(t, t.TempDir(), "c.json", string(again))
	l2, err := load(t, []string{"--config", file}, env{"HOME": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	l2.Settings.Remote = l.Settings.Remote
	if a, b := l.Settings, l2.Settings; !slices.Equal(a.AllowedOrigins, b.AllowedOrigins) || a.DataDir != b.DataDir || a.Socket != b.Socket || a.MaxBodyBytes != b.MaxBodyBytes || a.RequestTimeout != b.RequestTimeout {
		t.Errorf("round trip:\n%+v\n%+v", a, b)
	}
}

func TestArgs(t *testing.T) {
	t.Parallel()
	fs, f := config.NewFlagSet("install", nil)
	if err := fs.Parse([]string{"--data-dir", "rel/data", "--listen=127.0.0.1:9", "--force-listen", "--socket", "run/s.sock", "--socket=off", "--print-config", "--config", "c.json"}); err != nil {
		t.Fatal(err)
	}
	args, err := f.Args()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	want := []string{
		"--config=" + filepath.Join(wd, "c.json"),
		"--data-dir=" + filepath.Join(wd, "rel", "data"),
		"--listen=127.0.0.1:9",
		"--force-listen=true",
		"--socket=" + filepath.Join(wd, "run", "s.sock"),
		"--socket=off", // a word, not a path
	}
	if !slices.Equal(args, want) {
		t.Errorf("Args = %q, want %q", args, want)
	}
}

func TestMaxBodyBytesDerived(t *testing.T) {
	t.Parallel()
	l, err := load(t, []string{"--max-data-bytes", "1000"}, env{"HOME": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if l.Settings.MaxBodyBytes <= 1000 {
		t.Errorf("MaxBodyBytes = %d", l.Settings.MaxBodyBytes)
	}
	if _, err := load(t, []string{"--max-data-bytes", "1000", "--max-body-bytes", "10"}, env{"HOME": t.TempDir()}); !errors.Is(err, config.ErrInvalid) {
		t.Errorf("body below data: err = %v", err)
	}
}

func TestMkdirPrivate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "syncd")
	if err := config.MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("mode %o, want 700", perm)
	}
	// An existing directory is never chmodded (it may be someone's
	// home); one that others can write to is refused.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := config.MkdirPrivate(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("existing directory's mode changed to %o", fi.Mode().Perm())
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := config.MkdirPrivate(dir); err == nil {
		t.Error("a world-writable data directory was accepted")
	}
}

// The socket defaults to syncd.sock in the data directory finally
// chosen (off where the OS has no socket listener); off turns it off; a
// path is made absolute and checked.
func TestSocketSetting(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	dataDir := filepath.Join(t.TempDir(), "data")
	l, err := load(t, nil, env{"HOME": home, "SYNCD_DATA_DIR": dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if !localapi.UnixSocketSupported {
		if l.Settings.Socket != config.SocketOff {
			t.Errorf("default socket %q, want off here", l.Settings.Socket)
		}
		if _, err := load(t, []string{"--socket", filepath.Join(home, "s.sock")}, env{"HOME": home}); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "socket") {
			t.Errorf("a socket set here: err = %v, want ErrInvalid naming socket", err)
		}
		return
	}
	if want := filepath.Join(dataDir, localapi.SocketFileName); l.Settings.Socket != want || !l.Settings.SocketIsDefault() {
		t.Errorf("default socket %q (default %v), want %q", l.Settings.Socket, l.Settings.SocketIsDefault(), want)
	}
	// A data directory too deep for a socket is no error: syncd run
	// skips the default socket, warning.
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if l, err := load(t, nil, env{"HOME": home, "SYNCD_DATA_DIR": deep}); err != nil || !l.Settings.SocketIsDefault() {
		t.Errorf("a deep data directory: %v, default %v", err, l.Settings.SocketIsDefault())
	}
	file := writeFile(t, t.TempDir(), "c.json", `{"socket": "off"}`)
	if l, err := load(t, nil, env{"HOME": home, config.EnvConfig: file}); err != nil || l.Settings.Socket != config.SocketOff {
		t.Errorf("socket off in the file: %q, %v", l.Settings.Socket, err)
	}
	if l, err := load(t, nil, env{"HOME": home, "SYNCD_SOCKET": "/run/user/1000/syncd.sock"}); err != nil || l.Settings.Socket != "/run/user/1000/syncd.sock" || l.Settings.SocketIsDefault() {
		t.Errorf("SYNCD_SOCKET: %q, %v", l.Settings.Socket, err)
	}
	wd, _ := os.Getwd()
	if l, err := load(t, []string{"--socket", "rel/s.sock"}, env{"HOME": home}); err != nil || l.Settings.Socket != filepath.Join(wd, "rel", "s.sock") {
		t.Errorf("relative --socket: %q, %v", l.Settings.Socket, err)
	}
	long := "/" + strings.Repeat("s", 200)
	if _, err := load(t, []string{"--socket", long}, env{"HOME": home}); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "socket") || !strings.Contains(err.Error(), `"off"`) {
		t.Errorf("too long a socket path: err = %v, want ErrInvalid naming socket and off", err)
	}
	// A scratch daemon (syncd bench) has none.
	if s, err := config.Scratch(dataDir); err != nil || s.Socket != config.SocketOff {
		t.Errorf("Scratch socket %q, %v", s.Socket, err)
	}
}

// The ui setting: on by default, off from the file, the environment or
// the flag, the flag last.
func TestUISetting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		file string
		env  env
		args []string
		want string
	}{
		{"default", "", nil, nil, config.UIOn},
		{"file", `{"ui": "off"}`, nil, nil, config.UIOff},
		{"env", "", env{"SYNCD_UI": "off"}, nil, config.UIOff},
		{"flag", "", nil, []string{"--ui=off"}, config.UIOff},
		{"flag over file", `{"ui": "off"}`, nil, []string{"--ui", "on"}, config.UIOn},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env{"HOME": t.TempDir()}
			for k, v := range tt.env {
				e[k] = v
			}
			if tt.file != "" {
				e[config.EnvConfig] = writeFile(t, t.TempDir(), "c.json", tt.file)
			}
			l, err := load(t, append([]string{"--data-dir", t.TempDir()}, tt.args...), e)
			if err != nil {
				t.Fatal(err)
			}
			if l.Settings.UI != tt.want {
				t.Errorf("ui = %q, want %q", l.Settings.UI, tt.want)
			}
			var b bytes.Buffer
			if err := config.WriteJSON(&b, l.Settings); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), `"ui": "`+tt.want+`"`) {
				t.Errorf("--print-config lacks ui:\n%s", b.String())
			}
		})
	}
}
