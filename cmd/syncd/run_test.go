package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi/client"
)

// binDir holds the binary syncdBinary built; TestMain removes it.
var binDir atomic.Value

// syncdBinary builds the syncd binary once per test run.
var syncdBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "syncd-bin-")
	if err != nil {
		return "", err
	}
	binDir.Store(dir)
	bin := filepath.Join(dir, "syncd")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{err, string(out)}
	}
	return bin, nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

func TestMain(m *testing.M) {
	// The daemons tests start leave their running notes here, not in
	// this user's runtime directory (config.RunningDir).
	runDir, err := os.MkdirTemp("", "syncd-running-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_RUNTIME_DIR", runDir)
	code := m.Run()
	os.RemoveAll(runDir)
	if dir, ok := binDir.Load().(string); ok {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// daemonProc is a running `syncd run`.
type daemonProc struct {
	cmd    *exec.Cmd
	url    string
	socket string // the Unix socket's path; "" without one
	token  string
	stdout *bufio.Scanner
	stderr *strings.Builder
}

func startRun(t *testing.T, dataDir string, extra ...string) *daemonProc {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("SIGTERM")
	}
	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"run", "--data-dir", dataDir, "--listen", "127.0.0.1:0"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, stdout: bufio.NewScanner(stdout), stderr: new(strings.Builder)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var tokenPath string
	for tokenPath == "" && p.stdout.Scan() {
		line := p.stdout.Text()
		if u, ok := strings.CutPrefix(line, "syncd: listening on "); ok {
			if path, ok := strings.CutPrefix(u, "unix:"); ok {
				p.socket = path
			} else {
				p.url = u
			}
		}
		if tp, ok := strings.CutPrefix(line, "syncd: API token in "); ok {
			tokenPath = tp
		}
	}
	if p.url == "" || tokenPath == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no listening and token lines; stderr:\n%s", p.stderr)
	}
	if tokenPath != filepath.Join(dataDir, "api-token") {
		t.Errorf("token path %s", tokenPath)
	}
	b, err := os.ReadFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	p.token = strings.TrimSpace(string(b))
	return p
}

func (p *daemonProc) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, raw)
	}
	return res.StatusCode, m
}

// stop sends SIGTERM and waits for a clean exit.
func (p *daemonProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(drain(p.stdout))
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("still running 30s after SIGTERM; stderr:\n%s", p.stderr)
	}
	if !strings.Contains(string(rest), "syncd: stopped") {
		t.Errorf("no stopped line; stdout rest %q", rest)
	}
}

// drain returns the rest of a scanner's input, line by line.
func drain(s *bufio.Scanner) io.Reader {
	var b strings.Builder
	for s.Scan() {
		b.WriteString(s.Text() + "\n")
	}
	return strings.NewReader(b.String())
}

func TestRunProcess(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startRun(t, dataDir)
	if fi, err := os.Stat(dataDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v %v", fi, err)
	}
	if st, m := p.call(t, "PUT", "/v1/session", `{"accountId":"alice","accessToken":"t"}`); st != 200 {
		t.Fatalf("session: %d %v", st, m)
	}
	st, m := p.call(t, "POST", "/v1/entities/note", `{"id":"n1","data":{"title":"hello"}}`)
	if st != 201 || m["syncState"] != "pending" || m["operationId"] == "" {
		t.Fatalf("create: %d %v", st, m)
	}
	p.stop(t)

	// A restart keeps the token, the session and the entity.
	p2 := startRun(t, dataDir)
	if p2.token != p.token {
		t.Error("token changed across restarts")
	}
	// (pending, or synced if the embedded remote got it before the stop)
	if st, m := p2.call(t, "GET", "/v1/entities/note/n1", ""); st != 200 || m["syncState"] == "failed" {
		t.Errorf("after restart: %d %v", st, m)
	}
	p2.stop(t)
}

func TestRunRefusesNonLoopback(t *testing.T) {
	t.Parallel()
	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "run", "--data-dir", t.TempDir(), "--listen", "0.0.0.0:0").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--force-listen") {
		t.Errorf("exit %v, output %s", err, out)
	}
}

// allowedHosts reaches the local API's Host check: a listed name is
// served, any other name is refused.
func TestRunAllowedHosts(t *testing.T) {
	t.Parallel()
	rc, err := config.Scratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc.AllowedHosts = []string{"box.lan"}
	addr, token, stop, err := startDaemon(t.Context(), rc, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for host, want := range map[string]int{"box.lan": http.StatusOK, "box.lan:7419": http.StatusOK, "other.lan": http.StatusForbidden, addr: http.StatusOK} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
}

// syncd run hands the signed-in account to the queue totals: the
// queue.totals events carry its share.
func TestRunTotalsCarryAccount(t *testing.T) {
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
	c, err := client.New(client.Config{Addr: addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Types: []string{daemon.EventQueueTotals}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := c.SetSession(ctx, "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, "note", "n1", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var d daemon.TotalsData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.AccountID == "alice" && d.AccountCounts != nil {
			return
		}
	}
}
