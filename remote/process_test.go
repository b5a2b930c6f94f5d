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
	"sync/atomic"
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
	pauses   chan struct{} // one value per failpoint line (buffered)
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
	p := &proc{cmd: cmd, paused: make(chan struct{}), pauses: make(chan struct{}, 1000), readDone: make(chan struct{})}
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
				select {
				case p.pauses <- struct{}{}:
				default:
				}
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

// TestThreeReplicas: three `syncd server` processes on one PostgreSQL
// database. One key sent concurrently through all three executes once
// and every answer ends as the same 201. A hung replica's keys (held by
// requests paused after their reservation) answer 409 with Retry-After
// at once on the others, and do not slow new keys there (the test prints
// new-key latency with and without held keys); SIGKILLing the hung
// replica frees its keys, and each then executes once.
func TestThreeReplicas(t *testing.T) {
	t.Parallel()
	dsn := idempotencytest.PostgresDSN(t)
	// a, where new keys are timed, has a pool of 4 connections.
	a := startServer(t, nil, "--postgres", dsn+"&pool_max_conns=4")
	b, c := startServer(t, nil, "--postgres", dsn), startServer(t, nil, "--postgres", dsn)
	replicas := []*proc{a, b, c}
	h := remoteClient(t)
	counter, err := New(Config{PostgresDSN: dsn, DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	count := func(clientID string) int {
		t.Helper()
		n, err := counter.Count(context.Background(), "alice", "entries", clientID)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	body := func(clientID string) string {
		return `{"clientId":"` + clientID + `","data":{"value":7},"payloadVersion":1}`
	}

	// One key, 15 sends at once, 5 through each replica; a 409 is
	// retried as the daemon would, until it gets the stored answer.
	for round := range 5 {
		key, clientID := newKey(), newKey()
		results := make([]result, 15)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range results {
			wg.Go(func() {
				<-start
				p := replicas[i%3]
				for {
					r, err := h.doURL(p.url, "POST", "/v1/entries", "alice", key, body(clientID))
					if err != nil {
						t.Errorf("send %d: %v", i, err)
						return
					}
					if r.status == http.StatusConflict && r.header.Get("Retry-After") != "" {
						continue // in flight elsewhere: resend at once (the test's Retry-After)
					}
					results[i] = r
					return
				}
			})
		}
		close(start)
		wg.Wait()
		executed := 0
		for i, r := range results {
			if r.status != http.StatusCreated || r.body != results[0].body {
				t.Fatalf("round %d: answer %d is %d %s, want 201 %s", round, i, r.status, r.body, results[0].body)
			}
			if !r.replayed {
				executed++
			}
		}
		if executed != 1 || count(clientID) != 1 {
			t.Fatalf("round %d: %d executions, %d records; want 1, 1", round, executed, count(clientID))
		}
	}

	newKeyLatency := func() time.Duration {
		const n = 40
		began := time.Now()
		for range n {
			r, err := h.doURL(a.url, "POST", "/v1/entries", "alice", newKey(), body(newKey()))
			if err != nil || r.status != http.StatusCreated {
				t.Fatalf("new key: %d %s %v", r.status, r.body, err)
			}
		}
		return time.Since(began) / n
	}
	free := newKeyLatency()

	// Replace c with a replica that hangs in every request after its
	// reservation, and give it 6 keys to hold: more than a healthy
	// replica's pool has connections (4 on a), so duplicates that
	// waited there for their keys would leave no connection for new ones.
	c.stop(t)
	hung := startServer(t, []string{"SYNCD_FAILPOINT=remote-after-reserve"}, "--postgres", dsn+"&pool_max_conns=8")
	held := make([][2]string, 6)
	sent := make(chan error, len(held))
	for i := range held {
		held[i] = [2]string{newKey(), newKey()}
		go func() {
			_, err := h.doURL(hung.url, "POST", "/v1/entries", "alice", held[i][0], body(held[i][1]))
			sent <- err
		}()
		<-hung.pauses
	}
	for _, k := range held {
		for _, p := range []*proc{a, b} {
			r, err := h.doURL(p.url, "POST", "/v1/entries", "alice", k[0], body(k[1]))
			if err != nil || r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || codeOf(t, r) != "idempotency_in_flight" {
				t.Fatalf("held key on a healthy replica: %d %s %v, want 409 in flight", r.status, r.body, err)
			}
		}
	}
	// New keys on a while duplicates of the held keys keep arriving
	// there too (12 clients resending as soon as they get their 409): a
	// duplicate that waited for its key would hold one of a's pooled
	// connections while it did.
	stop := make(chan struct{})
	var dups sync.WaitGroup
	var answered409 atomic.Int64
	for i := range 12 {
		dups.Go(func() {
			k := held[i%len(held)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := h.doURL(a.url, "POST", "/v1/entries", "alice", k[0], body(k[1]))
				if err != nil || r.status != http.StatusConflict {
					t.Errorf("duplicate of a held key: %d %s %v", r.status, r.body, err)
					return
				}
				answered409.Add(1)
			}
		})
	}
	withHeld := newKeyLatency()
	close(stop)
	dups.Wait()
	t.Logf("new-key create on a healthy replica: %v with no keys held; %v with %d keys held by a hung replica and %d duplicates of them answered 409 meanwhile",
		free, withHeld, len(held), answered409.Load())

	hung.kill(t)
	for range held {
		if err := <-sent; err == nil {
			t.Fatal("a request to the killed replica got an answer")
		}
	}
	for _, k := range held {
		// PostgreSQL ends the killed replica's transactions when it sees
		// their connections close, a moment after the kill: until then
		// the key answers 409 with Retry-After, and is resent, as the
		// daemon does (the bound only turns a stuck key into a failure).
		var (
			r   result
			err error
		)
		for deadline := time.Now().Add(30 * time.Second); ; {
			r, err = h.doURL(b.url, "POST", "/v1/entries", "alice", k[0], body(k[1]))
			if err != nil || r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // the test's Retry-After
		}
		if err != nil || r.status != http.StatusCreated || r.replayed {
			t.Fatalf("a key freed by the kill: %d replayed=%v %s %v", r.status, r.replayed, r.body, err)
		}
		if again, err := h.doURL(a.url, "POST", "/v1/entries", "alice", k[0], body(k[1])); err != nil || !again.replayed || again.body != r.body {
			t.Fatalf("resend on another replica: %d replayed=%v %v", again.status, again.replayed, err)
		}
		if n := count(k[1]); n != 1 {
			t.Fatalf("records for a freed key: %d, want 1", n)
		}
	}
	a.stop(t)
	b.stop(t)
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
