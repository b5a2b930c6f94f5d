//go:build linux || darwin

package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
)

// shortDir is a fresh directory with a path short enough for a socket
// in it (t.TempDir's, with the test's name, may be too long on macOS).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// The client commands dial the config's socket when it exists, else its
// listen address; an address given (--addr, SYNCD_ADDR) or --socket off
// dials the address; --socket wins over everything.
func TestCLIUsesSocket(t *testing.T) {
	clearEnv(t) // not parallel: the shell's SYNCD_* would change the answers
	c := startCLI(t, localapitest.Options{Account: "alice", UnixSocket: true})
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "api-token"), []byte(localapitest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeConfig := func(listen, socket string) string {
		b, _ := json.Marshal(map[string]string{"listen": listen, "dataDir": dataDir, "socket": socket})
		f := filepath.Join(t.TempDir(), "syncd.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const nowhere = "127.0.0.1:1" // nothing listens there
	viaSocket := writeConfig(nowhere, c.Socket)
	missingSocket := writeConfig(c.Addr, filepath.Join(dataDir, "none.sock"))
	socketOff := writeConfig(c.Addr, "off")

	for _, tt := range []struct {
		name string
		env  string // SYNCD_ADDR
		args []string
		code int
	}{
		{"config socket", "", []string{"--config", viaSocket}, exitOK},
		{"socket missing: the address", "", []string{"--config", missingSocket}, exitOK},
		{"socket off: the address", "", []string{"--config", socketOff}, exitOK},
		{"--socket off", "", []string{"--config", viaSocket, "--socket", "off"}, exitUnreachable},
		{"--addr over the socket", "", []string{"--config", viaSocket, "--addr", nowhere}, exitUnreachable},
		{"SYNCD_ADDR over the socket", nowhere, []string{"--config", viaSocket}, exitUnreachable},
		{"--socket over everything", nowhere, []string{"--config", missingSocket, "--addr", nowhere, "--socket", c.Socket}, exitOK},
		{"--socket alone", "", []string{"--addr", nowhere, "--token-file", c.tokenFile, "--socket", c.Socket}, exitOK},
	} {
		t.Setenv("SYNCD_ADDR", tt.env)
		out, errOut, code := run2(c, append([]string{"status"}, tt.args...)...)
		if code != tt.code {
			t.Errorf("%s: exit %d, want %d: %s%s", tt.name, code, tt.code, out, errOut)
		}
		if code == exitOK && !strings.Contains(out, "alice") {
			t.Errorf("%s: status: %s", tt.name, out)
		}
	}
}

// `syncd run` serves its socket in the data directory (0700) with mode
// 0600 and removes it at a clean stop; one left by a killed daemon is
// replaced at the next start; the CLI finds it through the config; with
// socket off there is none.
func TestRunUnixSocket(t *testing.T) {
	clearEnv(t) // not parallel: the CLI reads SYNCD_*
	dataDir := filepath.Join(shortDir(t), "data")
	sock := filepath.Join(dataDir, localapi.SocketFileName)
	conf := filepath.Join(t.TempDir(), "syncd.json")
	// The config's listen leads nowhere: a status that works came over
	// the socket.
	if err := os.WriteFile(conf, []byte(`{"listen": "127.0.0.1:1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func(extra ...string) (string, int) {
		t.Helper()
		out, errOut, code := run2(nil, append([]string{"status", "--config", conf, "--data-dir", dataDir}, extra...)...)
		return out + errOut, code
	}
	checkModes := func() {
		t.Helper()
		for path, want := range map[string]fs.FileMode{dataDir: fs.ModeDir | 0o700, sock: fs.ModeSocket | 0o600} {
			if fi, err := os.Lstat(path); err != nil || fi.Mode() != want {
				t.Errorf("%s: %v, %v; want mode %v", path, fi, err, want)
			}
		}
	}

	p := startRun(t, dataDir)
	if p.socket != sock {
		t.Fatalf("socket line %q, want unix:%s", p.socket, sock)
	}
	checkModes()
	if out, code := status(); code != exitOK || !strings.Contains(out, "signed out") {
		t.Errorf("status over the socket: exit %d: %s", code, out)
	}
	if out, code := status("--socket", "off"); code != exitUnreachable {
		t.Errorf("status with --socket off: exit %d, want %d: %s", code, exitUnreachable, out)
	}
	if out, code := status("--addr", strings.TrimPrefix(p.url, "http://")); code != exitOK {
		t.Errorf("status over TCP: exit %d: %s", code, out)
	}

	// SIGKILL leaves the socket file behind; the next start replaces it.
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("after SIGKILL: %v, %v; want the stale socket", fi, err)
	}
	p = startRun(t, dataDir)
	checkModes()
	if out, code := status(); code != exitOK {
		t.Errorf("status after a restart over a stale socket: exit %d: %s", code, out)
	}
	p.stop(t)
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after a clean stop: %v", err)
	}

	p = startRun(t, dataDir, "--socket", "off")
	if p.socket != "" {
		t.Errorf("socket off: listening on unix:%s", p.socket)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket off: %v", err)
	}
	p.stop(t)
}

// A data directory open to other users (made by hand with mode 0755)
// gets no default socket: syncd run serves on TCP and warns how to get
// it, the directory left as it was. A socket the user chose there stops
// syncd run with the fix.
func TestRunOpenDataDirectorySkipsTheDefaultSocket(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(shortDir(t), "data")
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startRun(t, dataDir)
	if p.socket != "" {
		t.Errorf("a default socket in a 0755 directory: %s", p.socket)
	}
	if code, _ := p.call(t, "GET", "/v1/status", ""); code != 200 {
		t.Errorf("status over TCP: %d", code)
	}
	p.stop(t)
	for _, want := range []string{"no Unix socket", "chmod 700 " + dataDir} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, p.stderr)
		}
	}
	if fi, err := os.Stat(dataDir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("data directory: %v, %v; want it left 0755", fi, err)
	}

	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command(bin, "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--socket", filepath.Join(dataDir, "app.sock")).CombinedOutput()
	out := string(b)
	if err == nil {
		t.Fatalf("syncd run with a chosen socket in a 0755 directory succeeded:\n%s", out)
	}
	for _, want := range []string{dataDir, "chmod 700 " + dataDir, "socket to off"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
