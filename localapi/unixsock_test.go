//go:build linux || darwin

package localapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/peercred"
	"github.com/syncd/syncd/localapi/client"
)

// shortDir is a fresh directory (mode 0700) with a path short enough for
// a socket in it: t.TempDir's paths, with the test's name in them, may
// pass sockaddr_un's limit (103 bytes on macOS).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// perm is the permission bits of path (not following a symbolic link).
func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// unixHTTPClient is an HTTP client whose every request goes to the
// socket at path.
func unixHTTPClient(t testing.TB, path string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// recordHandler is a slog.Handler that hands each record to the test.
type recordHandler struct{ records chan slog.Record }

func newRecordLogger() (*slog.Logger, chan slog.Record) {
	ch := make(chan slog.Record, 16)
	return slog.New(recordHandler{ch}), ch
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error { h.records <- r; return nil }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h recordHandler) WithGroup(string) slog.Handler                 { return h }

// attrs are a record's attributes as text.
func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// A missing socket directory is made 0700, the socket is 0600, and
// closing the listener removes the socket file (the directory stays).
func TestListenUnixModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(shortDir(t), "run", "syncd")
	path := filepath.Join(dir, SocketFileName)
	ln, err := ListenUnix(path, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if m := perm(t, d); m != 0o700 {
			t.Errorf("directory %s made with mode %04o, want 0700", d, m)
		}
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after Close: %v", err)
	}
	if m := perm(t, dir); m != 0o700 {
		t.Errorf("directory after Close: mode %04o", m)
	}
}

// An existing directory that group or other may use is refused, named,
// with the fix, and left as it is.
func TestListenUnixRefusesOpenDirectory(t *testing.T) {
	t.Parallel()
	for _, mode := range []fs.FileMode{0o750, 0o705, 0o755, 0o710, 0o701, 0o777} {
		t.Run(fmt.Sprintf("%04o", mode), func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(shortDir(t), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, SocketFileName)
			ln, err := ListenUnix(path, discardLogger())
			if err == nil {
				ln.Close()
				t.Fatal("ListenUnix succeeded")
			}
			if !errors.Is(err, ErrSocketDirMode) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod 700 "+dir) {
				t.Errorf("err = %v; want ErrSocketDirMode naming %s and the fix", err, dir)
			}
			if m := perm(t, dir); m != mode {
				t.Errorf("directory mode changed to %04o", m)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("socket file made: %v", err)
			}
		})
	}
}

// A socket file nobody listens on (a daemon that was killed) is
// replaced; one another process listens on is refused and keeps
// working.
func TestListenUnixStaleSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(shortDir(t), SocketFileName)
	// No fork while the old listener is open: a child would hold it open
	// past Close until its exec, and it would look live.
	syscall.ForkLock.RLock()
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		syscall.ForkLock.RUnlock()
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false) // as a SIGKILL leaves it
	old.Close()
	syscall.ForkLock.RUnlock()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket: %v, %v", fi, err)
	}

	ln, err := ListenUnix(path, discardLogger())
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	defer ln.Close()
	if m := perm(t, path); m != 0o600 {
		t.Errorf("socket mode %04o", m)
	}

	// Now it is live: a second ListenUnix must not steal it.
	if ln2, err := ListenUnix(path, discardLogger()); err == nil {
		ln2.Close()
		t.Fatal("second ListenUnix on a live socket succeeded")
	} else if !errors.Is(err, ErrSocketPath) || !strings.Contains(err.Error(), "another process is listening") {
		t.Errorf("second ListenUnix: %v", err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("the first listener lost its socket: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

// Anything at the path that is not a socket is an error and is left
// alone.
func TestListenUnixRefusesOtherFiles(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(path string) error{
		"regular file": func(p string) error { return os.WriteFile(p, []byte("keep me"), 0o600) },
		"directory":    func(p string) error { return os.Mkdir(p, 0o700) },
		"symlink":      func(p string) error { return os.Symlink(filepath.Join(filepath.Dir(p), "elsewhere"), p) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(shortDir(t), SocketFileName)
			if err := mk(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := ListenUnix(path, discardLogger())
			if err == nil {
				ln.Close()
				t.Fatal("ListenUnix succeeded")
			}
			if !errors.Is(err, ErrSocketPath) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v; want ErrSocketPath naming the path", err)
			}
			after, err := os.Lstat(path)
			if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
				t.Errorf("file at the path changed: %v, %v", after, err)
			}
			if name == "regular file" {
				if b, _ := os.ReadFile(path); string(b) != "keep me" {
					t.Errorf("regular file now holds %q", b)
				}
			}
		})
	}
}

// A path longer than sockaddr_un holds is refused before anything is
// made; the longest one that fits works.
func TestListenUnixPathLength(t *testing.T) {
	t.Parallel()
	base := shortDir(t)
	// base/ddd…d/s: the directory name pads the path to n bytes.
	pathOf := func(n int) string {
		pad := n - len(base) - len("/") - len("/s")
		return filepath.Join(base, strings.Repeat("d", pad), "s")
	}
	long := pathOf(peercred.MaxPath + 1)
	if _, err := ListenUnix(long, discardLogger()); !errors.Is(err, ErrSocketPath) || !strings.Contains(err.Error(), strconv.Itoa(peercred.MaxPath)) {
		t.Errorf("%d-byte path: err = %v; want ErrSocketPath giving the limit", len(long), err)
	}
	if _, err := os.Stat(filepath.Dir(long)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory of a refused path made: %v", err)
	}
	fits := pathOf(peercred.MaxPath)
	ln, err := ListenUnix(fits, discardLogger())
	if err != nil {
		t.Fatalf("%d-byte path: %v", len(fits), err)
	}
	ln.Close()
}

// readRefusal dials the socket at path, sends a request with the right
// token and reads until the connection ends: it must end without a
// byte of answer.
func readRefusal(t *testing.T, path string) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	b, err := io.ReadAll(c)
	if len(b) > 0 {
		t.Fatalf("a refused peer got an answer: %q", b)
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read: %v; want EOF or a reset", err)
	}
}

// A peer of another user is closed without an answer and logged with its
// uid and pid, at most once a minute with a count of the others; Accept
// neither returns it nor fails. Here the listener takes the test itself
// for another user (the real other user is TestUnixSocketOtherUser).
func TestUnixListenerRefusesPeer(t *testing.T) {
	t.Parallel()
	path := filepath.Join(shortDir(t), SocketFileName)
	logger, records := newRecordLogger()
	ln, err := listenUnix(path, logger, os.Geteuid()+1)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ln.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
			err = errors.New("Accept returned a refused peer")
		}
		accepted <- err
	}()
	nextRecord := func() slog.Record {
		t.Helper()
		select {
		case r := <-records:
			return r
		case err := <-accepted:
			t.Fatalf("Accept returned before the listener closed: %v", err)
		}
		return slog.Record{}
	}

	readRefusal(t, path)
	r := nextRecord()
	a := attrs(r)
	if r.Level != slog.LevelWarn || a["uid"] != strconv.Itoa(os.Geteuid()) || a["pid"] != strconv.Itoa(os.Getpid()) || a["refusedSinceLastLine"] != "0" {
		t.Errorf("log line: %v %q %v", r.Level, r.Message, a)
	}
	// More within the minute: closed alike, not logged.
	readRefusal(t, path)
	readRefusal(t, path)
	if len(records) != 0 {
		t.Errorf("refusals within the minute logged: %q", (<-records).Message)
	}
	mu.Lock()
	now = now.Add(refusalLogEvery)
	mu.Unlock()
	readRefusal(t, path)
	if a := attrs(nextRecord()); a["refusedSinceLastLine"] != "2" {
		t.Errorf("next line: %v; want refusedSinceLastLine=2", a)
	}

	ln.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept: %v; want net.ErrClosed once the listener closes", err)
	}
}

// Run serves a loopback TCP listener and a Unix socket at once: the
// token is checked on both (401 without it), fromUnixSocket tells them
// apart and carries the peer's credentials, and stopping Run closes both
// and removes the socket file.
func TestRunTCPAndUnixSocket(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	path := filepath.Join(shortDir(t), SocketFileName)
	uln, err := ListenUnix(path, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		unix     bool
		uid, pid int
	}
	seenc := make(chan seen, 16)
	inner := e.srv.handler
	e.srv.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{unix: fromUnixSocket(r), uid: -1, pid: -1}
		if p, ok := peerOf(r); ok {
			s.uid, s.pid = p.UID, p.PID
		}
		seenc <- s
		inner.ServeHTTP(w, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, tln, uln) }()

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	tcp := *e
	tcp.url, tcp.client = "http://"+tln.Addr().String(), &http.Client{Transport: tr}
	sock := *e
	sock.url, sock.client = "http://localhost", unixHTTPClient(t, path)

	sock.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"via":"socket"}}`})
	if s := <-seenc; !s.unix || s.uid != os.Geteuid() || s.pid != os.Getpid() {
		t.Errorf("over the socket: %+v; want unix with uid %d, pid %d", s, os.Geteuid(), os.Getpid())
	}
	tcp.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"via":"tcp"}}`})
	if s := <-seenc; s.unix {
		t.Errorf("over TCP: %+v", s)
	}
	for name, env := range map[string]*env{"socket": &sock, "tcp": &tcp} {
		for _, auth := range []string{"", "Bearer wrong-token"} {
			r := env.do(req{method: "GET", path: "/v1/status", header: map[string]string{"Authorization": auth}})
			<-seenc
			if r.status != http.StatusUnauthorized || r.code() != CodeUnauthorized {
				t.Errorf("%s, Authorization %q: %d %s; want 401 unauthorized", name, auth, r.status, r.raw)
			}
		}
	}
	if l := sock.must(200, req{method: "GET", path: "/v1/entities/note"}); len(l.items()) != 2 {
		t.Errorf("list over the socket: %s", l.raw)
	}
	<-seenc
	// The Host check guards TCP against DNS rebinding; no browser can
	// reach the socket, so any Host passes there. Origin holds on both.
	sock.must(200, req{method: "GET", path: "/v1/status", host: "rebound.example.com"})
	<-seenc
	tcp.must(http.StatusForbidden, req{method: "GET", path: "/v1/status", host: "rebound.example.com"})
	<-seenc
	for name, env := range map[string]*env{"socket": &sock, "tcp": &tcp} {
		if r := env.do(req{method: "GET", path: "/v1/status", header: map[string]string{"Origin": "https://evil.example.com"}}); r.code() != CodeForbiddenOrigin {
			t.Errorf("%s, a foreign Origin: %d %s", name, r.status, r.raw)
		}
		<-seenc
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after Run: %v", err)
	}
	if c, err := net.Dial("tcp", tln.Addr().String()); err == nil {
		c.Close()
		t.Error("TCP listener still open after Run returned")
	}
}

// failingListener's Accept fails at once, as a listener whose descriptor
// broke would.
type failingListener struct{ net.Listener }

var errBrokenListener = errors.New("broken listener")

func (failingListener) Accept() (net.Conn, error) { return nil, errBrokenListener }

// When serving one listener fails, Run stops serving every other one
// (the socket file goes) and returns the error.
func TestRunStopsAllListenersOnError(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	path := filepath.Join(shortDir(t), SocketFileName)
	uln, err := ListenUnix(path, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = e.srv.Run(context.Background(), uln, failingListener{tln})
	if !errors.Is(err, errBrokenListener) {
		t.Fatalf("Run: %v; want the broken listener's error", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after Run: %v", err)
	}
	if c, err := net.Dial("tcp", tln.Addr().String()); err == nil {
		c.Close()
		t.Error("the failed listener is still open")
	}
	if err := e.srv.Run(context.Background(), uln); err == nil {
		t.Error("Run after Run succeeded")
	}
}

// Environment of the client that TestUnixSocketOtherUser runs as
// another user.
const (
	envOtherUserSocket = "SYNCD_TEST_OTHER_USER_SOCKET"
	otherUID           = 65534 // nobody
)

// TestUnixSocketOtherUserClient is not a test: TestUnixSocketOtherUser
// runs the test binary with it, as another user, to connect to a socket
// and report on stdout what happened.
func TestUnixSocketOtherUserClient(t *testing.T) {
	path := os.Getenv(envOtherUserSocket)
	if path == "" {
		t.Skip("run by TestUnixSocketOtherUser only")
	}
	c, err := net.Dial("unix", path)
	switch {
	case errors.Is(err, syscall.EACCES):
		fmt.Println("RESULT permission-denied")
		return
	case err != nil:
		fmt.Printf("RESULT dial-error %v\n", err)
		return
	}
	defer c.Close()
	_, werr := fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	b, rerr := io.ReadAll(c)
	switch {
	case len(b) > 0:
		line, _, _ := strings.Cut(string(b), "\r\n")
		fmt.Printf("RESULT answered %s\n", line)
	case rerr == nil || errors.Is(rerr, syscall.ECONNRESET) || errors.Is(werr, syscall.EPIPE) || errors.Is(werr, syscall.ECONNRESET):
		fmt.Printf("RESULT closed uid=%d pid=%d\n", os.Geteuid(), os.Getpid())
	default:
		fmt.Printf("RESULT read-error %v (write: %v)\n", rerr, werr)
	}
}

// A process of another user cannot use the socket. With the modes
// ListenUnix sets, the kernel refuses its connect (the directory is
// 0700, and the socket file alone, 0600, refuses it too). With both
// opened to everyone, its connection reaches the daemon, which reads its
// uid and closes it without an answer, logs it, and goes on serving this
// user. Needs root, to run a client as uid 65534 (CI runs as root).
func TestUnixSocketOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user (CI runs as root)")
	}
	// Not parallel: between fork and exec a child holds a copy of every
	// descriptor of this process, so a listener another test has just
	// closed would still take connections meanwhile.
	// A directory the other user can enter, holding a copy of this test
	// binary it can run, and the socket's own directory.
	base := otherUserBase(t)
	sockDir := filepath.Join(base, "sock")
	path := filepath.Join(sockDir, SocketFileName)

	e := setup(t, envOptions{account: "alice"})
	logger, records := newRecordLogger()
	ln, err := ListenUnix(path, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	mine := *e
	mine.url, mine.client = "http://localhost", unixHTTPClient(t, path)

	other := func() (result string, pid int) {
		t.Helper()
		cmd := otherUserCommand(base, "TestUnixSocketOtherUserClient", envOtherUserSocket+"="+path)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("client as uid %d: %v\n%s", otherUID, err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			if r, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
				return r, cmd.Process.Pid
			}
		}
		t.Fatalf("client as uid %d said nothing:\n%s", otherUID, out)
		return "", 0
	}

	// The modes ListenUnix set: the kernel refuses the other user.
	if r, _ := other(); r != "permission-denied" {
		t.Errorf("default modes: other user got %q; want permission-denied", r)
	}
	// The directory opened, the socket file still 0600: refused too.
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if r, _ := other(); r != "permission-denied" {
		t.Errorf("socket 0600 in an open directory: other user got %q; want permission-denied", r)
	}
	if len(records) != 0 {
		t.Errorf("the daemon saw a connection the kernel refused: %q", (<-records).Message)
	}
	// Both opened: the daemon itself refuses the peer.
	for _, p := range []string{sockDir, path} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	r, pid := other()
	if want := fmt.Sprintf("closed uid=%d pid=%d", otherUID, pid); r != want {
		t.Fatalf("modes opened: other user got %q; want %q (closed without an answer)", r, want)
	}
	rec := <-records
	if a := attrs(rec); rec.Level != slog.LevelWarn || a["uid"] != strconv.Itoa(otherUID) || a["pid"] != strconv.Itoa(pid) || a["path"] != path {
		t.Errorf("refusal logged as %v %q %v; want warn with uid %d, pid %d", rec.Level, rec.Message, a, otherUID, pid)
	}
	// The daemon goes on serving its own user.
	mine.must(200, req{method: "GET", path: "/v1/status"})
}

// envOtherUserServe makes the test binary, run by
// TestClientRefusesAnotherUsersSocket as another user, listen on a
// socket at that path instead.
const envOtherUserServe = "SYNCD_TEST_OTHER_USER_SERVE"

// TestUnixSocketOtherUserServer is not a test: as another user, it
// listens on a socket, says READY, takes one connection and says how
// many bytes came on it before it closed.
func TestUnixSocketOtherUserServer(t *testing.T) {
	path := os.Getenv(envOtherUserServe)
	if path == "" {
		t.Skip("run by TestClientRefusesAnotherUsersSocket only")
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Printf("RESULT listen-error %v\n", err)
		return
	}
	defer ln.Close()
	os.Chmod(path, 0o777)
	fmt.Println("READY")
	c, err := ln.Accept()
	if err != nil {
		fmt.Printf("RESULT accept-error %v\n", err)
		return
	}
	n, _ := io.Copy(io.Discard, c)
	fmt.Printf("RESULT received %d\n", n)
}

// A process of another user that took the socket's path (syncd stopped,
// a path in a directory it may write) gets nothing from the Go client,
// the CLI's: it reads the listener's credentials and closes before
// sending the token. Needs root, to run the listener as uid 65534.
func TestClientRefusesAnotherUsersSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a listener as another user (CI runs as root)")
	}
	// Not parallel, as TestUnixSocketOtherUser.
	base := otherUserBase(t)
	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(theirs, SocketFileName)
	cmd := otherUserCommand(base, "TestUnixSocketOtherUserServer", envOtherUserServe+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "READY" {
		t.Fatalf("the other user's listener: %q", sc.Text())
	}
	c, err := client.New(client.Config{Socket: path, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if _, err := c.Status(context.Background()); !errors.Is(err, client.ErrForeignSocket) {
		t.Fatalf("Status over another user's socket: %v; want ErrForeignSocket", err)
	}
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			if r != "received 0" {
				t.Errorf("the other user's listener %s; want nothing", r)
			}
			return
		}
	}
	t.Fatal("the other user's listener said nothing")
}

// The socket's directory and those above it must be this user's or
// root's, and no one else may write to them (but for sticky ones, as
// /tmp): another user could otherwise swap a directory on the way for
// one of theirs.
func TestListenUnixRefusesOpenAncestors(t *testing.T) {
	t.Parallel()
	base := shortDir(t)
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := ListenUnix(filepath.Join(open, "d", SocketFileName), discardLogger())
	if !errors.Is(err, ErrSocketDirMode) || !strings.Contains(err.Error(), open+", above the socket") {
		t.Errorf("under a 0777 directory: %v", err)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(filepath.Join(open, "d", SocketFileName), discardLogger())
	if err != nil {
		t.Fatalf("under a sticky 1777 directory: %v", err)
	}
	ln.Close()
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		if err := os.Mkdir(theirs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, otherUID, otherUID); err != nil {
			t.Fatal(err)
		}
		mine := filepath.Join(theirs, "mine")
		if err := os.Mkdir(mine, 0o755); err != nil { // root may, and owns it
			t.Fatal(err)
		}
		_, err := ListenUnix(filepath.Join(mine, "d", SocketFileName), discardLogger())
		if !errors.Is(err, ErrSocketDirMode) || !strings.Contains(err.Error(), fmt.Sprintf("belongs to user id %d", otherUID)) {
			t.Errorf("under another user's directory: %v", err)
		}
	}
}

// otherUserBase makes a directory under /tmp that another user may
// enter, holding a copy of this test binary it may run (t.TempDir's are
// 0700), removed when the test ends.
func otherUserBase(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("/tmp", "syncd-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFile(self, filepath.Join(base, "localapi.test"), 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

// otherUserCommand runs the test binary copied into base as uid
// otherUID, in the helper mode of test with env set.
func otherUserCommand(base, test, env string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(base, "localapi.test"), "-test.run=^"+test+"$", "-test.count=1")
	cmd.Dir = base
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	return cmd
}

func copyFile(from, to string, mode fs.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// BenchmarkReadsByListener measures what the Unix socket and an app
// token cost against loopback TCP and the admin token: GET of one entity
// (the guard, the grant's type check, a bbolt read, the answer), from 8
// clients, the four legs side by side in rounds in one process. It
// reports each leg's reads/s and the ratios socket/tcp and app/admin.
func BenchmarkReadsByListener(b *testing.B) {
	e := setup(b, envOptions{account: "alice"})
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{"title":"x"}}`})
	appToken := e.must(201, req{method: "POST", path: "/v1/apps", body: `{"name":"bench","types":["note"]}`}).str("token")
	tcpAddr, path := serveBoth(b, e)
	tcpTr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tcpTr.CloseIdleConnections()
	legs := []struct {
		name, url, token string
		client           *http.Client
	}{
		{"tcp_admin", "http://" + tcpAddr, testToken, &http.Client{Transport: tcpTr}},
		{"unix_admin", "http://localhost", testToken, unixHTTPClient(b, path)},
		{"tcp_app", "http://" + tcpAddr, appToken, &http.Client{Transport: tcpTr}},
		{"unix_app", "http://localhost", appToken, unixHTTPClient(b, path)},
	}
	get := func(client *http.Client, url, token string) error {
		r, _ := http.NewRequest("GET", url+"/v1/entities/note/n1", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(r)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET: %d", res.StatusCode)
		}
		return nil
	}
	const clients = 8
	rounds := max(2, b.N/400)
	per := max(1, b.N/rounds)
	durs := make([]time.Duration, len(legs))
	b.ResetTimer()
	for range rounds {
		for i, l := range legs {
			durs[i] += parallel(b, clients, per, func() error { return get(l.client, l.url, l.token) })
		}
	}
	b.StopTimer()
	rate := func(i int) float64 { return float64(rounds*per) / durs[i].Seconds() }
	for i, l := range legs {
		b.ReportMetric(rate(i), l.name+"_reads/s")
	}
	b.ReportMetric(rate(1)/rate(0), "unix/tcp")
	b.ReportMetric(rate(2)/rate(0), "app/admin")
}

// The bound on connections without the token is kept per listener:
// another user's idle connections to loopback TCP, which anyone on the
// machine may open, do not lock this user's apps out of the socket.
func TestTCPFloodLeavesTheSocketOpen(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{MaxUnauthenticatedConns: 3, ReadHeaderTimeout: time.Hour}})
	accepted := make(chan struct{}, 16)
	e.srv.testHookConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	tcpAddr, path := serveBoth(t, e)
	for range 3 {
		c, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		<-accepted
	}
	// TCP is full: a fourth connection is closed at once.
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("a fourth TCP connection was kept")
	}
	sock := *e
	sock.url, sock.client = "http://localhost", unixHTTPClient(t, path)
	sock.must(200, req{method: "GET", path: "/v1/status"})
}

// A socket connection closed at the bound is logged with its peer's uid
// and pid (a socket peer has no address).
func TestSocketConnectionsAtTheBoundAreLoggedWithTheirPeer(t *testing.T) {
	t.Parallel()
	logger, records := newRecordLogger()
	e := setup(t, envOptions{cfg: Config{MaxUnauthenticatedConns: 1, ReadHeaderTimeout: time.Hour, Logger: logger}})
	accepted := make(chan struct{}, 4)
	e.srv.testHookConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	_, path := serveBoth(t, e)
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		<-accepted
	}
	rec := <-records
	if want := fmt.Sprintf("unix uid=%d pid=%d", os.Geteuid(), os.Getpid()); attrs(rec)["remote"] != want {
		t.Errorf("logged %q %v; want remote %q", rec.Message, attrs(rec), want)
	}
}

// serveBoth runs e's server on a loopback TCP listener and a Unix socket
// until the test ends, and returns their address and path.
func serveBoth(t testing.TB, e *env) (tcpAddr, socketPath string) {
	t.Helper()
	socketPath = filepath.Join(shortDir(t), SocketFileName)
	uln, err := ListenUnix(socketPath, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		uln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, tln, uln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return tln.Addr().String(), socketPath
}
