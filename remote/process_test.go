package remote

// Tests that run `syncd server` as real processes: two replicas on one
// PostgreSQL database, and a server SIGKILLed between reservation and
// completion (placed there by the SYNCD_FAILPOINT test hook of
// cmd/syncd/server.go).

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/pgstore"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
	buildOut  []byte
)

// syncdBinary builds cmd/syncd once per test process and returns its path.
func syncdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tests skipped in -short mode")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "syncd-remote-test-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "syncd")
		if runtime.GOOS == "windows" {
			buildBin += ".exe"
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(goBin, "build", "-o", buildBin, "github.com/syncd/syncd/cmd/syncd")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/syncd: %v\n%s", buildErr, buildOut)
	}
	return buildBin
}

// removeBuild deletes the built binary; TestMain calls it.
func removeBuild() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// proc is one running `syncd server`.
type proc struct {
	cmd      *exec.Cmd
	url      string
	paused   chan struct{} // closed when the failpoint line appears on stderr
	readDone chan struct{}
	stderr   strings.Builder
	mu       sync.Mutex
}

// startServer starts `syncd server` on a free loopback port with args and
// extra environment, and waits for it to print its address.
func startServer(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	bin := syncdBinary(t)
	cmd := exec.Command(bin, append([]string{"server", "--listen", "127.0.0.1:0", "--dev-tokens"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, paused: make(chan struct{}), readDone: make(chan struct{})}
	go func() { // owned: ends when the process's stderr closes; cleanup waits
		defer close(p.readDone)
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if strings.HasPrefix(line, "failpoint remote-after-reserve") {
				once.Do(func() { close(p.paused) })
			}
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
		<-p.readDone
		if t.Failed() {
			t.Logf("server stderr:\n%s", p.log())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		<-p.readDone
		t.Fatalf("syncd server did not start: %v\n%s", err, p.log())
	}
	go io.Copy(io.Discard, stdout) // owned: ends when the process exits
	_, addr, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("unexpected first line %q", line)
	}
	p.url, _, _ = strings.Cut(addr, " ")
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
	<-p.readDone
}

// stop sends SIGINT (a clean shutdown) and waits.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("syncd server after SIGINT: %v\n%s", err, p.log())
	}
	<-p.readDone
}

func remoteClient(t *testing.T) *harness {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &harness{client: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// TestTwoServerProcessesSharePostgres: the same key sent to two
// `syncd server` replicas at once makes one record; one answer is the
// 201, the other a replay of it or a 409.
func TestTwoServerProcessesSharePostgres(t *testing.T) {
	t.Parallel()
	dsn := idempotencytest.PostgresDSN(t)
	a, b := startServer(t, nil, "--postgres", dsn), startServer(t, nil, "--postgres", dsn)
	h := remoteClient(t)
	// An in-process replica, to count records.
	counter, err := New(Config{PostgresDSN: dsn, DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()

	for round := range 10 {
		key, clientID := newKey(), newKey()
		body := `{"clientId":"` + clientID + `","data":{"value":120},"payloadVersion":1}`
		var ra, rb result
		var ea, eb error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; ra, ea = h.doURL(a.url, "POST", "/v1/entries", "alice.1", key, body) })
		wg.Go(func() { <-start; rb, eb = h.doURL(b.url, "POST", "/v1/entries", "alice.2", key, body) })
		close(start)
		wg.Wait()
		if ea != nil || eb != nil {
			t.Fatalf("round %d: %v %v", round, ea, eb)
		}
		first, other := ra, rb
		if ra.replayed || ra.status != 201 {
			first, other = rb, ra
		}
		if first.status != 201 || first.replayed {
			t.Fatalf("round %d: no first 201: a=%d %v b=%d %v", round, ra.status, ra.replayed, rb.status, rb.replayed)
		}
		t.Logf("round %d: second answer %d replayed=%v", round, other.status, other.replayed)
		switch {
		case other.status == 201 && other.replayed && other.body == first.body:
		case other.status == http.StatusConflict && other.header.Get("Retry-After") != "":
		default:
			t.Fatalf("round %d: second answer %d replayed=%v %s", round, other.status, other.replayed, other.body)
		}
		if n, err := counter.Count(context.Background(), "alice", "entries", clientID); err != nil || n != 1 {
			t.Fatalf("round %d: %d records, %v", round, n, err)
		}
		// The same key with another body, on either replica: 422.
		r, err := h.doURL(b.url, "POST", "/v1/entries", "alice.3", key, `{"clientId":"`+clientID+`x","data":{}}`)
		if err != nil || r.status != http.StatusUnprocessableEntity || codeOf(t, r) != "idempotency_key_reused" {
			t.Fatalf("round %d: reused key: %d %s %v", round, r.status, r.body, err)
		}
		if n, _ := counter.Count(context.Background(), "alice", "entries", clientID+"x"); n != 0 {
			t.Fatalf("round %d: the reused key wrote a record", round)
		}
	}
	// Missing key: 400 from the process too.
	if r, err := h.doURL(a.url, "POST", "/v1/entries", "alice", "", `{"clientId":"c","data":{}}`); err != nil || r.status != 400 {
		t.Fatalf("missing key: %d %v", r.status, err)
	}
	a.stop(t)
	b.stop(t)
}

// TestServerKilledAfterReserve: a server SIGKILLed between the
// reservation and the completion leaves nothing that blocks the next
// attempt: on PostgreSQL its transaction dies with its connection (well
// within the lease); on bbolt it never committed.
func TestServerKilledAfterReserve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"bbolt", func(t *testing.T) []string { return []string{"--data-dir", t.TempDir()} }},
		{"postgres", func(t *testing.T) []string { return []string{"--postgres", idempotencytest.PostgresDSN(t)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args(t)
			h := remoteClient(t)
			crashing := startServer(t, []string{"SYNCD_FAILPOINT=remote-after-reserve"}, args...)

			key, clientID := newKey(), newKey()
			body := `{"clientId":"` + clientID + `","data":{"value":1},"payloadVersion":1}`
			sent := make(chan error, 1)
			go func() {
				_, err := h.doURL(crashing.url, "POST", "/v1/entries", "alice", key, body)
				sent <- err
			}()
			<-crashing.paused
			crashing.kill(t)
			if err := <-sent; err == nil {
				t.Fatal("the request to the killed server got an answer")
			}

			next := startServer(t, nil, args...)
			began := time.Now()
			r, err := h.doURL(next.url, "POST", "/v1/entries", "alice", key, body)
			if err != nil || r.status != http.StatusCreated || r.replayed {
				t.Fatalf("next attempt: %d replayed=%v %s %v", r.status, r.replayed, r.body, err)
			}
			waited := time.Since(began)
			t.Logf("the next attempt after the crash answered in %v", waited)
			if waited >= pgstore.DefaultLease {
				t.Fatalf("next attempt waited %v, the lease is %v", waited, pgstore.DefaultLease)
			}
			again, err := h.doURL(next.url, "POST", "/v1/entries", "alice", key, body)
			if err != nil || !again.replayed || again.body != r.body {
				t.Fatalf("resend: %d replayed=%v %v", again.status, again.replayed, err)
			}
			list, err := h.doURL(next.url, "GET", "/v1/entries?clientId="+clientID, "alice", "", "")
			if err != nil || strings.Count(list.body, `"id"`) != 1 {
				t.Fatalf("records after the crash and retry: %s %v", list.body, err)
			}
			next.stop(t)
		})
	}
}

// doURL is do against another server.
func (h *harness) doURL(base, method, path, token, key, body string) (result, error) {
	c := *h
	c.url = base
	return c.do(method, path, token, key, body)
}

// TestServerCommandUsage: `syncd server` refuses bad flag combinations
// and a non-loopback address with exit code 2, before opening anything.
func TestServerCommandUsage(t *testing.T) {
	t.Parallel()
	bin := syncdBinary(t)
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:7420", "--data-dir", dir, "--dev-tokens"}, "not a loopback address"},
		{[]string{"--listen", ":7420", "--data-dir", dir, "--dev-tokens"}, "not a loopback address"},
		{[]string{"--data-dir", dir}, "--dev-tokens and --tokens"},
		{[]string{"--dev-tokens"}, "--data-dir and --postgres"},
		{[]string{"--data-dir", dir, "--postgres", "postgres://x", "--dev-tokens"}, "--data-dir and --postgres"},
		{[]string{"--data-dir", dir, "--dev-tokens", "--retention", "soon"}, "--retention"},
		{[]string{"--data-dir", dir, "--dev-tokens", "extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, append([]string{"server"}, tt.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tt.want) {
			t.Errorf("syncd server %q: %v\n%s\nwant exit 2 and %q", tt.args, err, out, tt.want)
		}
	}
}

// TestServerCommandTokensFile: --tokens maps tokens to actors; other
// tokens get 401.
func TestServerCommandTokensFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := syncdBinary(t)
	cmd := exec.Command(bin, "server", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--tokens", tokens, "--retention", "2d")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_, addr, _ := strings.Cut(line, "listening on ")
	url, _, _ := strings.Cut(addr, " ")
	h := remoteClient(t)
	ok, err := h.doURL(url, "POST", "/v1/notes", "s3cret", newKey(), `{"clientId":"c","data":{}}`)
	if err != nil || ok.status != http.StatusCreated {
		t.Fatalf("known token: %d %v", ok.status, err)
	}
	bad, err := h.doURL(url, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{}}`)
	if err != nil || bad.status != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d %v", bad.status, err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGINT: %v", err)
	}
}
