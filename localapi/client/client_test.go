package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(client.Config{Addr: addr, Token: localapitest.Token, HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Every call of the client against a real server.
func TestClientCRUD(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{})
	c := newClient(t, e.Addr)
	ctx := context.Background()

	if _, err := c.Create(ctx, "note", "", map[string]any{"title": "x"}); !client.IsCode(err, localapi.CodeNoSession) {
		t.Fatalf("create signed out: %v", err)
	}
	if err := c.SetSession(ctx, "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	n, err := c.Create(ctx, "note", "n1", map[string]any{"title": "milk"})
	if err != nil || n.ID != "n1" || n.SyncState != "pending" || n.OperationID == "" || n.AccountID != "alice" || n.Replayed {
		t.Fatalf("create: %+v, %v", n, err)
	}
	key := client.WriteOptions{IdempotencyKey: "key-0001"}
	k1, err := c.Create(ctx, "note", "", map[string]any{"title": "once"}, key)
	if err != nil || k1.OperationID != "key-0001" {
		t.Fatalf("create with key: %+v, %v", k1, err)
	}
	k2, err := c.Create(ctx, "note", "", map[string]any{"title": "once"}, key)
	if err != nil || !k2.Replayed || k2.ID != k1.ID {
		t.Fatalf("create replayed: %+v, %v", k2, err)
	}
	if _, err := c.Create(ctx, "note", "", map[string]any{"title": "other"}, key); !client.IsCode(err, localapi.CodeKeyReused) {
		t.Fatalf("key reused: %v", err)
	}
	u, err := c.Update(ctx, "note", "n1", map[string]any{"title": "oat milk"})
	if err != nil || u.Version != 2 || string(u.Data) != `{"title":"oat milk"}` {
		t.Fatalf("update: %+v (%s), %v", u, u.Data, err)
	}
	g, err := c.Get(ctx, "note", "n1")
	if err != nil || g.Version != 2 {
		t.Fatalf("get: %+v, %v", g, err)
	}
	l, err := c.List(ctx, "note", client.ListOptions{Limit: 1, SyncState: "pending"})
	if err != nil || len(l.Items) != 1 || l.Next == "" {
		t.Fatalf("list page 1: %+v, %v", l, err)
	}
	if l, err = c.List(ctx, "note", client.ListOptions{Limit: 1, After: l.Next}); err != nil || len(l.Items) != 1 {
		t.Fatalf("list page 2: %+v, %v", l, err)
	}
	d, err := c.Delete(ctx, "note", "n1")
	if err != nil || !d.Deleted {
		t.Fatalf("delete: %+v, %v", d, err)
	}
	if _, err := c.Get(ctx, "note", "n1"); !client.IsCode(err, localapi.CodeNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	var ce *client.Error
	if _, err := c.Get(ctx, "note", "nope"); !errors.As(err, &ce) || ce.Status != 404 || ce.Message == "" {
		t.Fatalf("error shape: %#v", err)
	}

	ops, err := c.Operations(ctx, client.ListOptions{State: "pending"})
	if err != nil || len(ops.Items) != 4 {
		t.Fatalf("operations: %+v, %v", ops, err)
	}
	op, err := c.Operation(ctx, k1.OperationID)
	if err != nil || op.ID != "key-0001" || op.Type != "create" || len(op.Payload) == 0 {
		t.Fatalf("operation: %+v, %v", op, err)
	}
	// Fail the head of k1's partition as a worker would; then retry and
	// discard through the client.
	if _, err := c.Retry(ctx, op.ID); !client.IsCode(err, localapi.CodeIllegalTransition) {
		t.Fatalf("retry of a pending op: %v", err)
	}
	id := failOp(t, e.Store, "alice")
	failed, err := c.Retry(ctx, id)
	if err != nil || failed.State != "pending" {
		t.Fatalf("retry: %+v, %v", failed, err)
	}
	id = failOp(t, e.Store, "alice")
	if err := c.Discard(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Operation(ctx, id); !client.IsCode(err, localapi.CodeNotFound) {
		t.Fatalf("discarded op: %v", err)
	}

	st, err := c.Status(ctx)
	if err != nil || !st.SignedIn || st.AccountID != "alice" || st.Counts["pending"] != 3 || st.LastEventSeq == 0 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if _, err := c.Logout(ctx, "purge", false); !client.IsCode(err, localapi.CodeNotPurgeable) {
		t.Fatalf("purge with unsent ops: %v", err)
	}
	if purged, err := c.Logout(ctx, "keep", false); err != nil || purged != 0 {
		t.Fatalf("logout: %d, %v", purged, err)
	}

	tr := &http.Transport{DisableKeepAlives: true}
	bad, _ := client.New(client.Config{Addr: e.Addr, Token: "wrong", HTTPClient: &http.Client{Transport: tr}})
	if _, err := bad.Status(ctx); !client.IsCode(err, localapi.CodeUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := bad.Subscribe(ctx, client.SubscribeOptions{}); !client.IsCode(err, localapi.CodeUnauthorized) {
		t.Fatalf("subscribe with a wrong token: %v", err)
	}
	if _, err := client.New(client.Config{Addr: e.Addr}); err == nil {
		t.Fatal("New without a token succeeded")
	}
}

// failOp claims the next ready operation and fails it permanently, as a
// worker would after a 400; it returns the operation's id.
func failOp(t *testing.T, s *queue.Store, account string) string {
	t.Helper()
	ctx := context.Background()
	op, err := s.Claim(ctx, account, "test-worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, op.ID, "test-worker", "validation", "title is required", false); err != nil {
		t.Fatal(err)
	}
	return op.ID
}

// collect reads n events from sub.
func collect(t *testing.T, sub *client.Subscription, n int) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([]client.Event, 0, n)
	for len(out) < n {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		out = append(out, ev)
	}
	return out
}

// checkLog checks that got is exactly the server's change log after
// since: nothing lost, nothing twice, in order.
func checkLog(t *testing.T, s *queue.Store, since uint64, got []client.Event) {
	t.Helper()
	log, _, err := s.Events(since, len(got))
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != len(got) {
		t.Fatalf("got %d events, the log has %d after %d", len(got), len(log), since)
	}
	for i := range log {
		if got[i].Seq != log[i].Seq || got[i].Type != log[i].Type || got[i].EntityID != log[i].EntityID || got[i].State != string(log[i].State) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], log[i])
		}
	}
}

// The server cuts a subscriber that stopped reading (1008); Next
// reconnects after the last seq it returned and loses nothing.
func TestSubscribeResumesAfterSlowSubscriberCut(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{
		Account: "alice",
		Bus:     daemon.BusConfig{SubscriberBuffer: 4},
		Config:  localapi.Config{EventSocketBuffer: 4096},
	})
	c := newClient(t, e.Addr)
	ctx := context.Background()
	since := e.Bus.LastSeq()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const writes = 500 // 1000 events: far more than the buffers hold
	for i := range writes {
		if _, err := c.Create(ctx, "note", "", map[string]any{"i": i, "pad": "........................................................................"}); err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, sub, 2*writes)
	checkLog(t, e.Store, since, got)
	if sub.Reconnects() == 0 {
		t.Fatal("the subscriber was never cut off: the test proves nothing")
	}
	t.Logf("%d events over %d reconnects", len(got), sub.Reconnects())
}

// A proxy between client and server drops every connection now and then
// while writes and the drain run; the subscription still returns each
// event once, in order.
func TestSubscribeResumesAfterDroppedConnections(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Drain: true})
	p := startProxy(t, e.Addr)
	c := newClient(t, p.addr)
	api := newClient(t, e.Addr)
	ctx := context.Background()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Since: e.Bus.LastSeq(), MaxReconnectDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	since := e.Bus.LastSeq()
	const writes = 40
	var got []client.Event
	done, made := 0, 0
	create := func() {
		if _, err := api.Create(ctx, "note", "", map[string]any{"i": made}); err != nil {
			t.Fatal(err)
		}
		made++
	}
	next := func() {
		ev := collect(t, sub, 1)[0]
		got = append(got, ev)
		if ev.Type == "operation.state" && ev.State == "done" {
			done++
		}
	}
	for i := range writes {
		create()
		next() // every write makes at least two events
		if i%4 == 3 {
			// Drop the connection mid-stream, write once more (so an
			// event is due after the reconnect), then read on until
			// the subscription has noticed and reconnected (it first
			// reads what was already buffered on its side).
			r := sub.Reconnects()
			p.dropAll()
			create()
			for sub.Reconnects() == r {
				next()
			}
		}
	}
	for done < made {
		next()
	}
	checkLog(t, e.Store, since, got)
	if sub.Reconnects() < writes/4 {
		t.Fatalf("%d reconnects, want %d", sub.Reconnects(), writes/4)
	}
	t.Logf("%d events over %d reconnects", len(got), sub.Reconnects())
}

// proxy forwards TCP connections to a server and can drop them all.
type proxy struct {
	addr string
	ln   net.Listener
	to   string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), ln: ln, to: to, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.dropAll()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, down) })
		p.wg.Go(func() { pipe(down, up) })
	}
}

func (p *proxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// The default HTTP client keeps enough idle connections for an app that
// writes from several goroutines: they are reused, not opened anew for
// most requests.
func TestDefaultClientReusesConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	conns := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"counts":{}}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := client.New(client.Config{Addr: srv.Listener.Addr().String(), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	const workers, rounds = 8, 25
	for range rounds {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				if _, err := c.Status(t.Context()); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if conns > 2*workers {
		t.Fatalf("%d connections opened for %d requests from %d goroutines", conns, workers*rounds, workers)
	}
}

// TestClientResolve: an entity in conflict shows the server's record
// beside its own; Resolve takes either; a synced one answers 409
// no_conflict, a bad take 400.
func TestClientResolve(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	c := newClient(t, e.Addr)
	ctx := context.Background()
	conflict := func(id string) {
		t.Helper()
		if _, err := c.Create(ctx, "note", id, map[string]any{"v": 1}); err != nil {
			t.Fatal(err)
		}
		op, err := e.Store.Claim(ctx, "alice", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Store.Complete(ctx, op.ID, "w", queue.Completion{ServerID: "s-" + id, ServerVersion: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Update(ctx, "note", id, map[string]any{"v": "mine"}); err != nil {
			t.Fatal(err)
		}
		if op, err = e.Store.Claim(ctx, "alice", "w", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := e.Store.Conflict(ctx, op.ID, "w", queue.CodeVersionConflict, "newer on the server", queue.ServerState{Version: 2, Data: json.RawMessage(`{"v":"theirs"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	conflict("a")
	got, err := c.Get(ctx, "note", "a")
	if err != nil || got.SyncState != "conflict" || got.Server == nil || got.Server.Version != 2 || string(got.Server.Data) != `{"v":"theirs"}` {
		t.Fatalf("entity in conflict: %+v %v", got, err)
	}
	var ce *client.Error
	if _, err := c.Resolve(ctx, "note", "a", "both"); !errors.As(err, &ce) || ce.Status != 400 {
		t.Fatalf("bad take: %v", err)
	}
	res, err := c.Resolve(ctx, "note", "a", client.TakeServer)
	if err != nil || res.SyncState != "synced" || string(res.Data) != `{"v":"theirs"}` || res.ServerVersion != 2 {
		t.Fatalf("take server: %+v %v", res, err)
	}
	if _, err := c.Resolve(ctx, "note", "a", client.TakeServer); !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "no_conflict" {
		t.Fatalf("resolve of a synced entity: %v", err)
	}
	conflict("b")
	res, err = c.Resolve(ctx, "note", "b", client.TakeLocal)
	if err != nil || res.SyncState != "pending" || res.OperationID == "" || string(res.Data) != `{"v":"mine"}` {
		t.Fatalf("take local: %+v %v", res, err)
	}
}

// TestClientRefresh: a refresh reads the record from the server and
// settles the entity; an id neither here nor on the server is 404;
// without a remote that answers, 503 remote_unavailable and nothing
// changes.
func TestClientRefresh(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Drain: true})
	c := newClient(t, e.Addr)
	ctx := context.Background()
	sub, err := c.Subscribe(ctx, client.SubscribeOptions{Since: e.Bus.LastSeq()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := c.Create(ctx, "note", "a", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	for ev := collect(t, sub, 1)[0]; ev.Type != "operation.state" || ev.State != "done"; ev = collect(t, sub, 1)[0] {
	}
	got, err := c.Refresh(ctx, "note", "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != `{"v":1}` || got.ServerVersion != 1 || got.Removed {
		t.Fatalf("refreshed: %+v", got)
	}
	if _, err := c.Refresh(ctx, "note", "nowhere"); !client.IsCode(err, "not_found") {
		t.Fatalf("refresh of an id neither here nor on the server: %v", err)
	}
	e.Remote.Close() // the remote's store is closed: reads fail
	var ce *client.Error
	if _, err := c.Refresh(ctx, "note", "a"); !errors.As(err, &ce) || ce.Status != 503 || ce.Code != "remote_unavailable" {
		t.Fatalf("refresh without a remote: %v", err)
	}
	if got, err := c.Get(ctx, "note", "a"); err != nil || got.SyncState != "synced" || string(got.Data) != `{"v":1}` {
		t.Fatalf("after a failed refresh: %+v %v", got, err)
	}
}

// TestClientBatch: one call, all or none; the refused write's index; the
// keys fixed by the client replay on a retry of the same call.
func TestClientBatch(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	c := newClient(t, e.Addr)
	ctx := context.Background()
	ws := []client.BatchWrite{
		{Op: "create", Type: "note", ID: "a", Data: map[string]any{"v": 1}, IdempotencyKey: "ka"},
		{Op: "create", Type: "note", ID: "b", Data: map[string]any{"v": 2}, IdempotencyKey: "kb"},
		{Op: "update", Type: "note", ID: "a", Data: map[string]any{"w": 3}, IdempotencyKey: "ka2"},
	}
	got, err := c.Batch(ctx, ws)
	if err != nil || len(got) != 3 || got[2].Version != 2 || got[0].OperationID != "ka" {
		t.Fatalf("batch: %+v %v", got, err)
	}
	again, err := c.Batch(ctx, ws)
	if err != nil || again[1].OperationID != "kb" {
		t.Fatalf("the same batch again: %+v %v", again, err)
	}
	if st, _ := e.Store.Stats(); st.Counts["pending"] != 3 {
		t.Fatalf("replayed batch wrote: %v", st.Counts)
	}
	_, err = c.Batch(ctx, []client.BatchWrite{{Op: "create", Type: "note", ID: "c", Data: map[string]any{}}, {Op: "delete", Type: "note", ID: "nope"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 404 || ce.Index != 1 {
		t.Fatalf("refused batch: %#v", err)
	}
	if _, err := c.Get(ctx, "note", "c"); !client.IsCode(err, "not_found") {
		t.Fatalf("the refused batch's first write was made: %v", err)
	}
}
