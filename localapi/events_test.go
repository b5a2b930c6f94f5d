package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
)

// wsOpts is one WebSocket handshake; zero fields mean: the token in the
// Authorization header, no Origin, no subprotocol.
type wsOpts struct {
	query     string // after "?"
	header    http.Header
	noToken   bool
	protocols []string
	// rcvbuf, when set, is the client socket's receive buffer: a small
	// one makes a subscriber that does not read back-pressure the
	// server quickly.
	rcvbuf int
}

// dialEvents opens GET /v1/events. It returns the HTTP answer (and its
// body) when the handshake is refused.
func dialEvents(t testing.TB, e *localapitest.Env, o wsOpts) (*websocket.Conn, *http.Response, string) {
	t.Helper()
	h := http.Header{}
	for k, v := range o.header {
		h[k] = v
	}
	if !o.noToken && h.Get("Authorization") == "" {
		h.Set("Authorization", "Bearer "+localapitest.Token)
	}
	d := websocket.Dialer{Subprotocols: o.protocols, HandshakeTimeout: 30 * time.Second}
	if o.rcvbuf > 0 {
		nd := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setRcvbuf(fd, o.rcvbuf) }); err != nil {
				return err
			}
			return serr
		}}
		d.NetDialContext = nd.DialContext
	}
	u := "ws://" + e.Addr + "/v1/events"
	if o.query != "" {
		u += "?" + o.query
	}
	conn, resp, err := d.Dial(u, h)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return nil, resp, string(b)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, resp, ""
}

func mustDial(t testing.TB, e *localapitest.Env, o wsOpts) *websocket.Conn {
	t.Helper()
	conn, resp, body := dialEvents(t, e, o)
	if conn == nil {
		t.Fatalf("handshake refused: %d %s", resp.StatusCode, body)
	}
	return conn
}

// readEvent reads one event, failing the test after 30s.
func readEvent(t testing.TB, conn *websocket.Conn) queue.Event {
	t.Helper()
	e, err := tryReadEvent(conn)
	if err != nil {
		t.Fatalf("reading an event: %v", err)
	}
	return e
}

func tryReadEvent(conn *websocket.Conn) (queue.Event, error) {
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var e queue.Event
	err := conn.ReadJSON(&e)
	return e, err
}

// api sends one request with the token and returns the decoded answer.
func api(t testing.TB, e *localapitest.Env, method, path, body string) map[string]any {
	t.Helper()
	out, err := tryAPI(e, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryAPI is api for goroutines other than the test's.
func tryAPI(e *localapitest.Env, method, path, body string) (map[string]any, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		return nil, err
	}
	r.Close = true // no idle connection outlives the test (goleak)
	r.Header.Set("Authorization", "Bearer "+localapitest.Token)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s %s: %v", method, path, err)
	}
	if res.StatusCode >= 300 {
		return out, fmt.Errorf("%s %s: %d %v", method, path, res.StatusCode, out)
	}
	return out, nil
}

func createNote(t testing.TB, e *localapitest.Env, i int) {
	t.Helper()
	api(t, e, "POST", "/v1/entities/note", fmt.Sprintf(`{"id":"n%d","data":{"title":"note %d"}}`, i, i))
}

// retained returns the change log, the truth every stream must match.
func retained(t testing.TB, e *localapitest.Env) []queue.Event {
	t.Helper()
	events, _, err := e.Store.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// sameEvents checks that got is exactly the log's events from got[0] on:
// every seq once, in order, with the same content.
func sameEvents(t testing.TB, got, log []queue.Event) {
	t.Helper()
	if len(got) == 0 {
		t.Fatal("no events")
	}
	var start int
	for start < len(log) && log[start].Seq < got[0].Seq {
		start++
	}
	for i, g := range got {
		if start+i >= len(log) {
			t.Fatalf("event %d (seq %d) is past the log's end", i, g.Seq)
		}
		w := log[start+i]
		if g.Seq != w.Seq || g.Type != w.Type || g.EntityID != w.EntityID || g.State != w.State || g.SyncState != w.SyncState || g.OperationID != w.OperationID {
			t.Fatalf("event %d: got %+v, want %+v", i, g, w)
		}
	}
}

// A subscriber that disconnects while operations change state (writes
// and the drain sending them) and reconnects with since gets every
// missed event once, in order.
func TestEventsResumeAfterDisconnect(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Drain: true})
	const writes = 30
	conn := mustDial(t, e, wsOpts{query: "since=0"})
	var got []queue.Event
	done := 0
	read := func(conn *websocket.Conn) {
		ev := readEvent(t, conn)
		got = append(got, ev)
		if ev.Type == queue.EventOperationState && ev.State == queue.StateDone {
			done++
		}
	}
	for i := range writes / 3 {
		createNote(t, e, i)
	}
	for range 10 {
		read(conn)
	}
	conn.Close() // away while the rest is written and sent
	for i := writes / 3; i < writes; i++ {
		createNote(t, e, i)
	}
	conn = mustDial(t, e, wsOpts{query: fmt.Sprintf("since=%d", got[len(got)-1].Seq)})
	for done < writes {
		read(conn)
	}
	if got[0].Seq != 1 {
		t.Fatalf("first event seq %d, want 1", got[0].Seq)
	}
	sameEvents(t, got, retained(t, e))
	t.Logf("%d events over two connections, %d operations done", len(got), done)
}

// A since older than the retained history gets one resync event, at
// the newest seq; resuming after it is seamless.
func TestEventsResync(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Bus: daemon.BusConfig{History: 2}, Queue: queue.Config{EventHistory: 4}})
	for i := range 5 {
		createNote(t, e, i) // seqs 2..11 (1 is the session)
	}
	if _, _, err := e.Store.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, since := range []string{"0", "1", "5", "999"} {
		conn := mustDial(t, e, wsOpts{query: "since=" + since})
		ev := readEvent(t, conn)
		if ev.Type != daemon.EventResync || ev.Seq != 11 || ev.Time.IsZero() {
			t.Fatalf("since=%s: first event %+v, want resync at 11", since, ev)
		}
		conn.Close()
	}
	conn := mustDial(t, e, wsOpts{query: "since=11"})
	createNote(t, e, 99)
	if ev := readEvent(t, conn); ev.Seq != 12 || ev.Type != queue.EventEntityChanged {
		t.Fatalf("after resync: %+v", ev)
	}
}

// 200 subscribers at once all see the same sequence.
func TestEvents200Subscribers(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	const subs, writes = 200, 20
	conns := make([]*websocket.Conn, subs)
	for i := range conns {
		conns[i] = mustDial(t, e, wsOpts{}) // no since: from now on
	}
	start := e.Bus.LastSeq()
	var wg sync.WaitGroup
	results := make([][]queue.Event, subs)
	errs := make([]error, subs)
	for i, c := range conns {
		wg.Go(func() {
			for range 2 * writes {
				ev, err := tryReadEvent(c)
				if err != nil {
					errs[i] = err
					return
				}
				results[i] = append(results[i], ev)
			}
		})
	}
	for i := range writes {
		createNote(t, e, i)
	}
	wg.Wait()
	log := retained(t, e)
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("subscriber %d: %v", i, errs[i])
		}
		if r[0].Seq != start+1 {
			t.Fatalf("subscriber %d starts at %d, want %d", i, r[0].Seq, start+1)
		}
		sameEvents(t, r, log)
	}
}

// A subscriber that never reads is cut off with 1008 and a reason, and
// it does not slow the writes or the drain: the same writes, each waited
// for until the daemon has sent it, run with and without it attached.
// Only that both finish is asserted; the times are logged.
func TestEventsSlowSubscriberIsCutOff(t *testing.T) {
	t.Parallel()
	if !canSetRcvbuf {
		t.Skip("needs a small socket receive buffer to make a subscriber that does not read fall behind")
	}
	e := localapitest.Start(t, localapitest.Options{
		Account: "alice", Drain: true,
		// 200 writes make about 1,000 events: far more than the stuck
		// subscriber holds, and room for the healthy one to be
		// descheduled a while on a loaded machine (at 256 it once fell
		// behind under -race with other packages' tests running).
		Bus:    daemon.BusConfig{SubscriberBuffer: 512},
		Config: localapi.Config{EventWriteTimeout: 5 * time.Minute, EventSocketBuffer: 4096},
	})
	const writes = 200
	// A healthy subscriber sees each operation done: the drain's pace.
	watch := mustDial(t, e, wsOpts{})
	round := func(from int) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := from + w; i < from+writes; i += 4 {
					if _, err := tryAPI(e, "POST", "/v1/entities/note", fmt.Sprintf(`{"id":"n%d","data":{"title":"note %d"}}`, i, i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		for done := 0; done < writes; {
			if ev := readEvent(t, watch); ev.Type == queue.EventOperationState && ev.State == queue.StateDone {
				done++
			}
		}
		wg.Wait()
		return time.Since(t0)
	}
	without := round(0)
	stuck := mustDial(t, e, wsOpts{rcvbuf: 2048})
	with := round(writes)

	// The stuck one reads now: what fitted in the buffers, then 1008.
	var n int
	var err error
	for {
		if _, err = tryReadEvent(stuck); err != nil {
			break
		}
		n++
	}
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != localapi.CloseSlowSubscriber || !strings.HasPrefix(ce.Text, "slow_subscriber:") {
		t.Fatalf("stuck subscriber ended with %v after %d events, want close 1008 slow_subscriber", err, n)
	}
	t.Logf("%d writes sent to the remote: %v without a stuck subscriber, %v with one (ratio %.2f); the stuck one got %d of %d events before 1008 %q",
		writes, without.Round(time.Millisecond), with.Round(time.Millisecond), float64(without)/float64(with), n, 5*writes, ce.Text)
}

// The handshake is refused without the token, with a wrong one, and from
// an Origin not on the allowlist; ?token= and the subprotocol work.
func TestEventsHandshake(t *testing.T) {
	t.Parallel()
	const allowed = "http://localhost:5173"
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Config: localapi.Config{AllowedOrigins: []string{allowed}}})
	refused := []struct {
		name   string
		o      wsOpts
		status int
		code   string
	}{
		{"no token", wsOpts{noToken: true}, 401, localapi.CodeUnauthorized},
		{"wrong token", wsOpts{header: http.Header{"Authorization": {"Bearer nope"}}}, 401, localapi.CodeUnauthorized},
		{"wrong query token", wsOpts{noToken: true, query: "token=nope"}, 401, localapi.CodeUnauthorized},
		{"wrong protocol token", wsOpts{noToken: true, protocols: []string{"syncd.v1", "syncd.token.nope"}}, 401, localapi.CodeUnauthorized},
		{"cross-origin page", wsOpts{header: http.Header{"Origin": {"https://evil.example"}}}, 403, localapi.CodeForbiddenOrigin},
		{"cross-origin page with query token", wsOpts{noToken: true, query: "token=" + localapitest.Token, header: http.Header{"Origin": {"https://evil.example"}}}, 403, localapi.CodeForbiddenOrigin},
		{"token protocol without syncd.v1", wsOpts{noToken: true, protocols: []string{"syncd.token." + localapitest.Token}}, 400, localapi.CodeInvalidRequest},
		{"bad since", wsOpts{query: "since=-1"}, 400, localapi.CodeInvalidRequest},
		{"unknown parameter", wsOpts{query: "sinse=1"}, 400, localapi.CodeInvalidRequest},
		{"bad entity type", wsOpts{query: "entityType=a/b"}, 400, localapi.CodeInvalidRequest},
		{"rebound DNS name", wsOpts{header: http.Header{"Host": {"evil.example"}}}, 403, localapi.CodeForbiddenHost},
	}
	for _, tc := range refused {
		conn, resp, body := dialEvents(t, e, tc.o)
		if conn != nil {
			t.Errorf("%s: handshake accepted", tc.name)
			continue
		}
		var eb struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal([]byte(body), &eb)
		if resp.StatusCode != tc.status || eb.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
	}

	// Not a WebSocket handshake at all.
	r, _ := http.NewRequest("GET", e.URL+"/v1/events", nil)
	r.Close = true
	r.Header.Set("Authorization", "Bearer "+localapitest.Token)
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("plain GET: %d, want 426", res.StatusCode)
	}
	// ?token= is for the events path only.
	r, _ = http.NewRequest("GET", e.URL+"/v1/status?token="+localapitest.Token, nil)
	r.Close = true
	if res, err = http.DefaultClient.Do(r); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("status with ?token=: %d, want 401", res.StatusCode)
	}

	accepted := []struct {
		name string
		o    wsOpts
		// protocol is the subprotocol the server must select.
		protocol string
	}{
		{"header", wsOpts{}, ""},
		{"query token", wsOpts{noToken: true, query: "token=" + url.QueryEscape(localapitest.Token)}, ""},
		{"protocol token", wsOpts{noToken: true, protocols: []string{"syncd.v1", "syncd.token." + localapitest.Token}}, "syncd.v1"},
		{"allowed origin", wsOpts{noToken: true, query: "token=" + localapitest.Token, header: http.Header{"Origin": {allowed}}}, ""},
	}
	for i, tc := range accepted {
		conn, resp, body := dialEvents(t, e, tc.o)
		if conn == nil {
			t.Errorf("%s: refused: %d %s", tc.name, resp.StatusCode, body)
			continue
		}
		if conn.Subprotocol() != tc.protocol {
			t.Errorf("%s: subprotocol %q, want %q", tc.name, conn.Subprotocol(), tc.protocol)
		}
		if p := resp.Header.Get("Sec-WebSocket-Protocol"); strings.Contains(p, "token") {
			t.Errorf("%s: the answer echoes the token protocol %q", tc.name, p)
		}
		createNote(t, e, i)
		if ev := readEvent(t, conn); ev.Type != queue.EventEntityChanged || ev.EntityID != fmt.Sprintf("n%d", i) {
			t.Errorf("%s: first event %+v", tc.name, ev)
		}
	}
}

// Filters select by event type (or prefix), entity type and account.
func TestEventsFilters(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	ops := mustDial(t, e, wsOpts{query: "type=operation.,session.changed"})
	tasks := mustDial(t, e, wsOpts{query: "entityType=task"})
	bob := mustDial(t, e, wsOpts{query: "account=bob"})
	createNote(t, e, 1)
	api(t, e, "POST", "/v1/entities/task", `{"id":"t1","data":{}}`)
	api(t, e, "PUT", "/v1/session", `{"accountId":"bob","accessToken":"bob.1"}`)
	for _, want := range []string{"note/n1 operation.state", "task/t1 operation.state", "/ session.changed"} {
		ev := readEvent(t, ops)
		if got := ev.EntityType + "/" + ev.EntityID + " " + ev.Type; got != want {
			t.Errorf("type filter: got %s, want %s", got, want)
		}
	}
	for _, want := range []string{queue.EventEntityChanged, queue.EventOperationState} {
		if ev := readEvent(t, tasks); ev.Type != want || ev.EntityType != "task" {
			t.Errorf("entity type filter: got %+v", ev)
		}
	}
	if ev := readEvent(t, bob); ev.Type != daemon.EventSessionChanged || ev.AccountID != "bob" {
		t.Errorf("account filter: got %+v", ev)
	}
}

// At the subscriber limit a handshake gets 503 too_many_subscribers.
func TestEventsSubscriberLimit(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Bus: daemon.BusConfig{MaxSubscribers: 2}})
	mustDial(t, e, wsOpts{})
	mustDial(t, e, wsOpts{})
	conn, resp, body := dialEvents(t, e, wsOpts{})
	if conn != nil || resp.StatusCode != 503 || !strings.Contains(body, localapi.CodeTooManySubscribers) {
		t.Fatalf("third subscriber: %v %s", resp.Status, body)
	}
}

// The server pings; a subscriber that answers stays connected. (The
// interval leaves a stalled test process 600 ms to answer: at 100 ms, a
// loaded CI machine once let the server drop the subscriber.)
func TestEventsPing(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Config: localapi.Config{PingInterval: 300 * time.Millisecond}})
	conn := mustDial(t, e, wsOpts{})
	pings := make(chan struct{}, 100)
	conn.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	go func() {
		for range 5 {
			<-pings
		}
		// After 5 pings, more than two intervals: still connected.
		if _, err := tryAPI(e, "POST", "/v1/entities/note", `{"id":"n1","data":{}}`); err != nil {
			t.Error(err)
		}
	}()
	if ev := readEvent(t, conn); ev.EntityID != "n1" {
		t.Fatalf("got %+v", ev)
	}
}

// Shutdown sends every subscriber 1001 going away, and Run returns.
func TestEventsShutdownGoingAway(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	conns := []*websocket.Conn{mustDial(t, e, wsOpts{}), mustDial(t, e, wsOpts{query: "token=" + localapitest.Token, noToken: true})}
	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop() }()
	for i, c := range conns {
		_, err := tryReadEvent(c)
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || !strings.HasPrefix(ce.Text, "shutting_down:") {
			t.Errorf("subscriber %d ended with %v, want 1001 going away", i, err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := e.Bus.Subscribers(); n != 0 {
		t.Fatalf("%d subscriptions left open", n)
	}
}

// The handshake that used to wedge the daemon: since=2^64-1 overflowed
// in the bus with its lock held. It is a resync (a since past every seq
// ever published), and afterwards writes commit and publish, other
// subscribers get them, and the server shuts down cleanly.
func TestEventsAbsurdSince(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	createNote(t, e, 0)
	last := e.Bus.LastSeq()
	conn := mustDial(t, e, wsOpts{query: "since=18446744073709551615"})
	if ev := readEvent(t, conn); ev.Type != daemon.EventResync || ev.Seq != last {
		t.Fatalf("first event %+v, want resync at %d", ev, last)
	}
	other := mustDial(t, e, wsOpts{})
	createNote(t, e, 1)
	for _, c := range []*websocket.Conn{conn, other} {
		if ev := readEvent(t, c); ev.Seq != last+1 || ev.EntityID != "n1" {
			t.Fatalf("after the write: %+v", ev)
		}
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := e.Bus.Subscribers(); n != 0 {
		t.Fatalf("%d subscriptions left open", n)
	}
}

// The connection timeouts leave event streams alone: a stream outlives
// the body, idle and header timeouts and still gets events.
func TestEventsOutliveConnectionTimeouts(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Config: localapi.Config{
		ReadHeaderTimeout: 50 * time.Millisecond,
		BodyTimeout:       50 * time.Millisecond,
		IdleTimeout:       50 * time.Millisecond,
	}})
	conn := mustDial(t, e, wsOpts{})
	// A connection the timeouts close, opened after the stream: once it
	// is closed, the stream has been open longer than they allow.
	c, err := net.Dial("tcp", e.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("waiting for the idle connection to be closed: %v", err)
	}
	createNote(t, e, 0)
	if ev := readEvent(t, conn); ev.EntityID != "n0" {
		t.Fatalf("got %+v", ev)
	}
}
