package localapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// runServer runs e's server with Run on a loopback listener until the
// test ends, and returns its address.
func runServer(t *testing.T, e *env) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ln.Addr().String()
}

// waitClosed reads c until the server closes it. The deadline is only a
// guard against a hang: the server's own timeouts are far shorter.
func waitClosed(c net.Conn) error {
	_, err := readUntilClosed(c)
	return err
}

func readUntilClosed(c net.Conn) (string, error) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var got strings.Builder
	_, err := io.Copy(&got, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return got.String(), errors.New("still open after 30s")
	}
	return got.String(), nil // EOF or a reset: closed
}

// Connections that declare a body and send none are closed after the
// body timeout, authenticated or not, and so are idle keep-alives and
// requests whose headers never end; 300 such connections hold nothing
// for long. Small timeouts, and no timing asserted: each connection is
// simply waited for until the server closes it.
func TestStalledConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{
		ReadHeaderTimeout: 100 * time.Millisecond,
		BodyTimeout:       100 * time.Millisecond,
		IdleTimeout:       100 * time.Millisecond,
		// All 300 are served, so that the timeouts close them (the
		// limit would close most at once: the next test).
		MaxUnauthenticatedConns: 1000,
	}})
	addr := runServer(t, e)
	const stalled = `POST /v1/entities/note HTTP/1.1
Host: 127.0.0.1
Content-Type: application/json
Content-Length: 100
%s
`
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	type probe struct{ name, send, answer string }
	var probes []probe
	for i := range 300 {
		probes = append(probes, probe{fmt.Sprintf("unauthenticated body %d", i), crlf(fmt.Sprintf(stalled, "")), ""})
	}
	for i := range 20 {
		probes = append(probes, probe{fmt.Sprintf("authenticated body %d", i), crlf(fmt.Sprintf(stalled, "Authorization: Bearer "+testToken+"\n")), "HTTP/1.1 408 "})
	}
	for i := range 20 {
		probes = append(probes, probe{fmt.Sprintf("headers never end %d", i), "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n", ""})
	}
	for i := range 20 {
		probes = append(probes, probe{fmt.Sprintf("idle keep-alive %d", i), crlf("GET /v1/status HTTP/1.1\nHost: 127.0.0.1\nAuthorization: Bearer " + testToken + "\n\n"), "HTTP/1.1 200 "})
	}
	var wg sync.WaitGroup
	for _, p := range probes {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			if _, err := io.WriteString(c, p.send); err != nil && !isClosed(err) {
				t.Errorf("%s: write: %v", p.name, err)
				return
			}
			got, err := readUntilClosed(c)
			if err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
			if !strings.HasPrefix(got, p.answer) || strings.HasPrefix(p.answer, "HTTP/1.1 408") && !strings.Contains(got, CodeRequestTimeout) {
				t.Errorf("%s: answered %q, want %q", p.name, got, p.answer)
			}
		})
	}
	wg.Wait()
	// The daemon still serves.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, crlf("GET /v1/status HTTP/1.1\nHost: 127.0.0.1\nConnection: close\nAuthorization: Bearer "+testToken+"\n\n"))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("after the stalled connections: %v %v", res, err)
	}
	res.Body.Close()
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe")
}

// slowDaemon's SetSession waits until the test lets it go, then reports
// whether its request's context ended meanwhile.
type slowDaemon struct {
	*fakeDaemon
	entered chan struct{}
	release chan struct{}
}

func (d *slowDaemon) SetSession(ctx context.Context, a, tok string) error {
	close(d.entered)
	<-d.release
	return ctx.Err()
}

// Requests whose bodies arrive in time are served, on kept-alive
// connections too; and a handler that runs longer than the body timeout
// after reading its body is not cut off (net/http would cancel its
// context if the read deadline were left to expire).
func TestBodyTimeoutLeavesGoodRequests(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{BodyTimeout: 100 * time.Millisecond}})
	e.url = "http://" + runServer(t, e)
	for i := range 20 {
		e.must(201, req{method: "POST", path: "/v1/entities/note", body: fmt.Sprintf(`{"id":"n%d","data":{}}`, i)})
	}

	d := &slowDaemon{fakeDaemon: &fakeDaemon{}, entered: make(chan struct{}), release: make(chan struct{})}
	srv, err := New(Config{Daemon: d, Store: fakeStore{}, Token: testToken, Logger: discardLogger(), BodyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow := &env{t: t, srv: srv, client: &http.Client{}}
	slow.url = "http://" + runServer(t, slow)
	answered := make(chan resp, 1)
	go func() {
		answered <- slow.do(req{method: "PUT", path: "/v1/session", body: `{"accountId":"alice","accessToken":"t"}`, header: map[string]string{"Connection": "close"}})
	}()
	<-d.entered
	// A stalled body on another connection, begun after the PUT's body
	// was read, is closed by its timeout: the PUT's would have passed.
	c, err := net.Dial("tcp", slow.url[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PUT /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+testToken+"\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
	if err := waitClosed(c); err != nil {
		t.Fatal(err)
	}
	close(d.release)
	if r := <-answered; r.status != 200 {
		t.Fatalf("slow handler: %d %s", r.status, r.raw)
	}
}

// At most MaxUnauthenticatedConns connections may wait without having
// sent a request that carried the token; more are closed at once. A
// connection stops counting once it authenticates.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{MaxUnauthenticatedConns: 5, ReadHeaderTimeout: time.Hour}})
	accepted := make(chan struct{}, 100)
	e.srv.testHookConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			accepted <- struct{}{}
		}
	}
	addr := runServer(t, e)
	dial := func(n int) []net.Conn {
		conns := make([]net.Conn, n)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns[i] = c
		}
		for range n {
			<-accepted
		}
		return conns
	}
	status := func(c net.Conn) (int, error) {
		if _, err := io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "+testToken+"\r\n\r\n"); err != nil {
			return 0, err
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	served, closed := 0, 0
	for _, c := range dial(10) {
		switch code, err := status(c); {
		case err == nil && code == 200:
			served++
		case err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
			closed++
		default:
			t.Fatalf("status %d, %v", code, err)
		}
	}
	if served != 5 || closed != 5 {
		t.Fatalf("10 connections at a limit of 5: %d served, %d closed", served, closed)
	}
	// The five served have authenticated: five new ones fit.
	for i, c := range dial(5) {
		if code, err := status(c); err != nil || code != 200 {
			t.Fatalf("new connection %d: %d %v", i, code, err)
		}
	}
}

// A connection without the token that repeats bodiless requests refused
// before the token check (401, a foreign Host or Origin, a preflight) is
// closed after the first answer: it cannot hold a slot of the bound by
// coming back before each idle timeout.
func TestRefusedRequestsCloseUnauthenticatedConnections(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{MaxUnauthenticatedConns: 2, AllowedOrigins: []string{"http://localhost:3000"}}})
	addr := runServer(t, e)
	for name, req := range map[string]string{
		"no token":       "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"foreign host":   "GET /v1/status HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"foreign origin": "GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\r\n",
		"preflight":      "OPTIONS /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://localhost:3000\r\nAccess-Control-Request-Method: GET\r\n\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		got, err := readUntilClosed(c)
		if err != nil {
			t.Fatalf("%s: the connection stayed open after the refusal (%v): %q", name, err, got)
		}
		if !strings.HasPrefix(got, "HTTP/1.1 ") {
			t.Fatalf("%s: no answer before the close: %q", name, got)
		}
	}
	// An authenticated keep-alive connection is not closed by a later
	// refused request.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, req := range []string{
		"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\n\r\n",
		"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + testToken + "\r\n\r\n",
	} {
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the authenticated connection: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}
