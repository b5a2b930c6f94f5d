package main

// Tests of issue 30, "from clone to a running service without
// surprises": the client finds its daemon, help and errors read the
// same everywhere, version and build metrics, doctor.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/remote"
)

// cli runs syncd in-process as main would and returns what main would
// print and its exit status.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		printError(&errOut, err)
	}
	return out.String(), errOut.String(), exitStatus(err)
}

// isolate gives the test its own runtime directory (where running
// daemons leave their notes) and home, and clears SYNCD_*.
func isolate(t *testing.T) string {
	t.Helper()
	clearEnv(t)
	runDir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", runDir)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	return runDir
}

// TestDiscoveryTwoDaemons: client commands run without --data-dir find
// the daemon of this user whatever --data-dir it was started with; with
// two running they list both and ask; --addr and SYNCD_DATA_DIR choose.
func TestDiscoveryTwoDaemons(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("SIGTERM")
	}
	isolate(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startRun(t, dirA)
	_, errOut, code := cli(t, "status", "--json")
	if code != 0 || !strings.Contains(errOut, "talking to the syncd running on "+dirA) {
		t.Fatalf("one daemon: exit %d, stderr %q; want it found and named", code, errOut)
	}
	if _, errOut, code := cli(t, "ops", "list"); code != 0 {
		t.Errorf("ops list, one daemon: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "apps", "list"); code != 0 {
		t.Errorf("apps list, one daemon: exit %d: %s", code, errOut)
	}

	b := startRun(t, dirB)
	_, errOut, code = cli(t, "status")
	if code != exitUsage || !strings.Contains(errOut, "2 syncds are running") || !strings.Contains(errOut, "--data-dir "+dirA) || !strings.Contains(errOut, "--data-dir "+dirB) {
		t.Errorf("two daemons: exit %d, stderr:\n%s\nwant both listed and exit %d", code, errOut, exitUsage)
	}
	addrB := strings.TrimPrefix(b.url, "http://")
	if _, errOut, code := cli(t, "status", "--addr", addrB); code != 0 || !strings.Contains(errOut, dirB) {
		t.Errorf("--addr of B: exit %d, stderr %q; want B's token found", code, errOut)
	}
	t.Setenv("SYNCD_DATA_DIR", dirA)
	if _, errOut, code := cli(t, "status"); code != 0 || strings.Contains(errOut, "talking to") {
		t.Errorf("SYNCD_DATA_DIR: exit %d, stderr %q; want A, without discovery", code, errOut)
	}
	t.Setenv("SYNCD_DATA_DIR", "")

	// Killed, B leaves its note behind: the next client finds it dead.
	b.cmd.Process.Signal(syscall.SIGKILL)
	b.cmd.Wait()
	if _, errOut, code := cli(t, "status"); code != 0 || !strings.Contains(errOut, dirA) {
		t.Errorf("B killed: exit %d, stderr %q; want A alone", code, errOut)
	}
	a.stop(t)
	if _, errOut, code := cli(t, "status"); code != exitUnreachable || !strings.Contains(errOut, "syncd run") {
		t.Errorf("none running: exit %d, stderr %q; want %d and how to start one", code, errOut, exitUnreachable)
	}
}

// TestHelpEverySubcommand: `syncd X --help` and `syncd help X` print X's
// usage and succeed, for every command and subcommand.
func TestHelpEverySubcommand(t *testing.T) {
	isolate(t)
	var cmds [][]string
	for _, c := range commands() {
		cmds = append(cmds, []string{c.name})
	}
	for _, sub := range []string{"list", "show", "retry", "discard"} {
		cmds = append(cmds, []string{"ops", sub})
	}
	for _, sub := range []string{"add", "list", "remove"} {
		cmds = append(cmds, []string{"apps", sub})
	}
	for _, sub := range []string{"install", "status", "start"} {
		cmds = append(cmds, []string{"service", sub})
	}
	for _, c := range cmds {
		want := "usage: syncd " + c[0]
		for _, h := range []string{"--help", "-h"} {
			_, errOut, code := cli(t, append(c, h)...)
			if code != 0 || !strings.Contains(errOut, want) {
				t.Errorf("syncd %s %s: exit %d, stderr %q; want %q", strings.Join(c, " "), h, code, firstLine(errOut), want)
			}
		}
		out, errOut, code := cli(t, append([]string{"help"}, c...)...)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("syncd help %s: exit %d, stdout %q, stderr %q; want %q on stdout", strings.Join(c, " "), code, firstLine(out), firstLine(errOut), want)
		}
	}
	if out, _, code := cli(t, "help"); code != 0 || !strings.Contains(out, "commands:") {
		t.Errorf("syncd help: exit %d: %q", code, out)
	}
	if _, errOut, code := cli(t, "help", "nope"); code != exitUsage || !strings.Contains(errOut, `unknown command "nope"`) {
		t.Errorf("syncd help nope: exit %d: %q", code, errOut)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestBadFlag: a bad flag is one line naming it and a hint where the
// usage is, never the usage around the error; exit 2.
func TestBadFlag(t *testing.T) {
	isolate(t)
	for _, c := range [][]string{{"run"}, {"server"}, {"status"}, {"doctor"}, {"ops", "list"}, {"apps", "add"}, {"events"}, {"compact"}, {"service", "install"}, {"service", "status"}, {"version"}} {
		out, errOut, code := cli(t, append(c, "--bogus")...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || out != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "syncd: "+strings.Join(c, " ")+": ") || !strings.Contains(lines[0], "-bogus") ||
			lines[1] != "run 'syncd help "+c[0]+"' for usage" {
			t.Errorf("syncd %s --bogus: exit %d, stdout %q, stderr:\n%s", strings.Join(c, " "), code, out, errOut)
		}
	}
	if _, errOut, code := cli(t, "ops", "--help"); code != 0 || strings.Contains(errOut, "unknown subcommand") {
		t.Errorf("ops --help: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "ops", "nope"); code != exitUsage || !strings.Contains(errOut, `unknown subcommand "nope"`) {
		t.Errorf("ops nope: exit %d: %s", code, errOut)
	}
}

// TestErrorText: an API error is said once, without package names.
func TestErrorText(t *testing.T) {
	c := startCLI(t, localapitest.Options{Account: "alice"})
	var out, buf bytes.Buffer
	err := run([]string{"ops", "show", "--addr", c.Addr, "--token-file", c.tokenFile, "nope"}, &out, &out)
	printError(&buf, err) // as main prints it
	got, code := buf.String(), exitStatus(err)
	if code != exitNotFound || strings.Contains(got, "syncd: syncd:") || strings.Contains(got, "queue:") || !strings.Contains(got, "not found") {
		t.Errorf("ops show nope: exit %d, printed %q", code, got)
	}
	for in, want := range map[string]string{
		"syncd: queue: operation not found: nope (404 not_found)":            "operation not found: nope (404 not_found)",
		"usage: run: config: invalid setting: flag provided but not defined": "run: invalid setting: flag provided but not defined",
		"service: install syncd: service: already installed: syncd":          "install syncd: already installed: syncd",
		"a: a: b": "a: b",
	} {
		if got := plainMessage(in); got != want {
			t.Errorf("plainMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := cli(t, "version")
	if code != 0 || !strings.HasPrefix(out, "syncd ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: exit %d: %q", code, out)
	}
	out, _, _ = cli(t, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.GoVersion != runtime.Version() || v.Version == "" || v.Commit == "" {
		t.Errorf("version --json: %v: %s", err, out)
	}
	if out2, _, _ := cli(t, "--version"); out2 != strings.TrimSpace(func() string { o, _, _ := cli(t, "version"); return o }())+"\n" {
		t.Errorf("--version: %q", out2)
	}
}

// TestBuildInfoMetric: /metrics carries syncd_build_info and the Go
// runtime's collector.
func TestBuildInfoMetric(t *testing.T) {
	t.Parallel()
	rc, err := config.Scratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr, token, stop, err := startDaemon(t.Context(), rc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	v := buildVersion()
	want := `syncd_build_info{commit="` + v.Commit + `",goversion="` + v.GoVersion + `",version="` + v.Version + `"} 1`
	for _, w := range []string{want, "go_goroutines ", "offline_queue_depth"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}

// doctorJSON runs syncd doctor --json with args.
func doctorJSON(t *testing.T, args ...string) (healthy bool, checks map[string]check, code int) {
	t.Helper()
	out, errOut, code := cli(t, append([]string{"doctor", "--json", "--service-name", "syncd-doctor-test"}, args...)...)
	var r struct {
		Healthy bool    `json:"healthy"`
		Checks  []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json: %v; stdout %q stderr %q", err, out, errOut)
	}
	checks = map[string]check{}
	for _, c := range r.Checks {
		checks[c.Name] = c
	}
	return r.Healthy, checks, code
}

// startForDoctor starts a daemon in-process syncing to remoteURL ("":
// the embedded reference server) and signs it in with token.
func startForDoctor(t *testing.T, remoteURL, token string) (rc config.Settings, c *client.Client, stop func()) {
	t.Helper()
	rc, err := config.Scratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc.Remote = remoteURL
	addr, apiToken, stop, err := startDaemon(t.Context(), rc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err = client.New(client.Config{Addr: addr, Token: apiToken})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetSession(t.Context(), "alice", token); err != nil {
		t.Fatal(err)
	}
	return rc, c, stop
}

// waitEvent waits for the first event of type typ whose data contains
// want.
func waitEvent(t *testing.T, c *client.Client, typ, want string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Types: []string{typ}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		if b, _ := json.Marshal(ev); strings.Contains(string(b), want) {
			return
		}
	}
}

func TestDoctorHealthyThenStopped(t *testing.T) {
	isolate(t)
	rc, c, stop := startForDoctor(t, "", "alice.token")
	// A write that reaches the server: the remote has answered.
	if _, err := c.Create(t.Context(), "note", "n1", json.RawMessage(`{"t":1}`)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, "operation.", `"done"`)
	healthy, checks, code := doctorJSON(t, "--data-dir", rc.DataDir)
	if !healthy || code != 0 {
		t.Errorf("healthy daemon: healthy %v, exit %d, checks %+v", healthy, code, checks)
	}
	for _, name := range []string{"daemon", "token", "account", "remote", "remote server", "clock", "data file", "disk", "queue"} {
		if checks[name].Status != checkOK {
			t.Errorf("healthy daemon: check %q = %+v, want ok", name, checks[name])
		}
	}
	stop()
	healthy, checks, code = doctorJSON(t, "--data-dir", rc.DataDir)
	if healthy || code != exitFailure || checks["daemon"].Status != checkFail || !strings.Contains(checks["daemon"].Fix, "syncd run") {
		t.Errorf("stopped daemon: healthy %v, exit %d, daemon %+v", healthy, code, checks["daemon"])
	}
}

func TestDoctorUnreachableRemote(t *testing.T) {
	isolate(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	rc, c, stop := startForDoctor(t, dead, "alice.token")
	defer stop()
	if _, err := c.Create(t.Context(), "note", "n1", json.RawMessage(`{"t":1}`)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, "connectivity.changed", `false`)
	healthy, checks, code := doctorJSON(t, "--data-dir", rc.DataDir)
	if healthy || code != exitFailure || checks["remote"].Status != checkFail || checks["remote server"].Status != checkFail || checks["daemon"].Status != checkOK {
		t.Errorf("unreachable remote: healthy %v, exit %d, checks %+v", healthy, code, checks)
	}
}

func TestDoctorBadToken(t *testing.T) {
	isolate(t)
	srv, err := remote.New(remote.Config{DataDir: t.TempDir(), Tokens: map[string]string{"good": "alice"}, LoopbackHostsOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx, ln) }()
	defer func() { cancel(); <-done; srv.Close() }()

	rc, c, stop := startForDoctor(t, "http://"+ln.Addr().String(), "bad")
	defer stop()
	if _, err := c.Create(t.Context(), "note", "n1", json.RawMessage(`{"t":1}`)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, "session.refresh_needed", "")
	healthy, checks, code := doctorJSON(t, "--data-dir", rc.DataDir)
	if healthy || code != exitFailure || checks["remote"].Status != checkFail || !strings.Contains(checks["remote"].Detail, "paused") {
		t.Errorf("bad token: healthy %v, exit %d, checks %+v", healthy, code, checks)
	}

	// The local API refusing the token read is a finding too.
	bad := filepath.Join(t.TempDir(), "api-token")
	os.WriteFile(bad, []byte("not-the-token\n"), 0o600)
	_, checks, code = doctorJSON(t, "--data-dir", rc.DataDir, "--token-file", bad)
	if code != exitFailure || checks["daemon"].Status != checkFail || !strings.Contains(checks["daemon"].Detail, "refuses the token") {
		t.Errorf("wrong API token: exit %d, daemon %+v", code, checks["daemon"])
	}
}
