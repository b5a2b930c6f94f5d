package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

func TestEntityFlow(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})

	c := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"title":"buy milk","tags":{"a":1,"b":2}}}`})
	id := c.str("id")
	if id == "" || c.str("operationId") == "" || c.str("syncState") != "pending" || c.str("type") != "note" || c.str("accountId") != "alice" {
		t.Fatalf("create answer: %s", c.raw)
	}
	if c.str("lastOperationId") != c.str("operationId") {
		t.Errorf("lastOperationId %q, operationId %q", c.str("lastOperationId"), c.str("operationId"))
	}

	g := e.must(200, req{method: "GET", path: "/v1/entities/note/" + id})
	jsonEq(t, g.body["data"], `{"title":"buy milk","tags":{"a":1,"b":2}}`)
	if g.str("syncState") != "pending" || g.str("operationId") != "" {
		t.Errorf("get answer: %s", g.raw)
	}

	l := e.must(200, req{method: "GET", path: "/v1/entities/note?syncState=pending"})
	if items := l.items(); len(items) != 1 || items[0]["id"] != id || l.str("next") != "" {
		t.Errorf("list pending: %s", l.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/entities/note?syncState=synced"}); len(l.items()) != 0 {
		t.Errorf("list synced: %s", l.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/entities/task"}); len(l.items()) != 0 {
		t.Errorf("list of another type: %s", l.raw)
	}

	p := e.must(200, req{method: "PATCH", path: "/v1/entities/note/" + id, body: `{"data":{"title":"buy oat milk","tags":{"a":null,"c":3}}}`})
	jsonEq(t, p.body["data"], `{"title":"buy oat milk","tags":{"b":2,"c":3}}`)
	if p.body["version"] != 2.0 || p.str("operationId") == c.str("operationId") {
		t.Errorf("patch answer: %s", p.raw)
	}

	d := e.must(200, req{method: "DELETE", path: "/v1/entities/note/" + id})
	if d.body["deleted"] != true || d.str("operationId") == "" || d.str("syncState") != "pending" {
		t.Errorf("delete answer: %s", d.raw)
	}
	e.must(404, req{method: "GET", path: "/v1/entities/note/" + id})
	if l := e.must(200, req{method: "GET", path: "/v1/entities/note"}); len(l.items()) != 0 {
		t.Errorf("list after delete: %s", l.raw)
	}
	ops := e.must(200, req{method: "GET", path: "/v1/operations"})
	var types []string
	for _, op := range ops.items() {
		types = append(types, fmt.Sprint(op["operationType"], "/", op["state"]))
		if _, ok := op["payload"]; ok {
			t.Errorf("list item carries its payload: %v", op)
		}
	}
	if got := strings.Join(types, " "); got != "create/pending update/pending delete/pending" {
		t.Errorf("operations: %s", got)
	}
}

func TestListPages(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	for i := range 5 {
		e.must(201, req{method: "POST", path: "/v1/entities/note", body: fmt.Sprintf(`{"id":"n%d","data":{"i":%d}}`, i, i)})
	}
	var ids, opSeqs []string
	for path := "/v1/entities/note?limit=2"; ; {
		r := e.must(200, req{method: "GET", path: path})
		for _, it := range r.items() {
			ids = append(ids, it["id"].(string))
		}
		if r.str("next") == "" {
			break
		}
		path = "/v1/entities/note?limit=2&after=" + r.str("next")
	}
	if got := strings.Join(ids, ","); got != "n0,n1,n2,n3,n4" {
		t.Errorf("entity pages: %s", got)
	}
	for path := "/v1/operations?limit=2"; ; {
		r := e.must(200, req{method: "GET", path: path})
		for _, it := range r.items() {
			opSeqs = append(opSeqs, fmt.Sprint(it["seq"]))
		}
		if r.str("next") == "" {
			break
		}
		path = "/v1/operations?limit=2&after=" + r.str("next")
	}
	if got := strings.Join(opSeqs, ","); got != "1,2,3,4,5" {
		t.Errorf("operation pages: %s", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

	first := e.must(201, req{method: "POST", path: "/v1/entities/note", header: key("press-1"), body: `{"data":{"title":"a","n":1}}`})
	if first.str("operationId") != "press-1" || first.header.Get(headerReplayed) != "" {
		t.Fatalf("first create: %v %s", first.header, first.raw)
	}
	before := e.snapshot()

	// The same request again, keys reordered and spaced: same answer,
	// replayed, nothing written.
	again := e.must(201, req{method: "POST", path: "/v1/entities/note", header: key("press-1"), body: "{ \"data\" : {\"n\":1, \"title\":\"a\"} }"})
	if again.header.Get(headerReplayed) != "true" || again.str("operationId") != "press-1" || again.str("id") != first.str("id") {
		t.Errorf("replay: %v %s", again.header, again.raw)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("replay wrote: before %+v after %+v", before, after)
	}

	// Another body, another route, another method: conflicts.
	for _, rq := range []req{
		{method: "POST", path: "/v1/entities/note", header: key("press-1"), body: `{"data":{"title":"b","n":1}}`},
		{method: "POST", path: "/v1/entities/task", header: key("press-1"), body: `{"data":{"title":"a","n":1}}`},
		{method: "PATCH", path: "/v1/entities/note/" + first.str("id"), header: key("press-1"), body: `{"data":{"title":"a","n":1}}`},
		{method: "DELETE", path: "/v1/entities/note/" + first.str("id"), header: key("press-1")},
	} {
		if r := e.do(rq); r.status != 422 || r.code() != CodeKeyReused {
			t.Errorf("%s %s with a used key: %d %s", rq.method, rq.path, r.status, r.raw)
		}
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("conflicts wrote: before %+v after %+v", before, after)
	}

	// PATCH and DELETE replay with their own status.
	id := first.str("id")
	p1 := e.must(200, req{method: "PATCH", path: "/v1/entities/note/" + id, header: key("edit-1"), body: `{"data":{"n":2}}`})
	p2 := e.must(200, req{method: "PATCH", path: "/v1/entities/note/" + id, header: key("edit-1"), body: `{"data":{"n":2}}`})
	if p2.header.Get(headerReplayed) != "true" || p2.str("operationId") != "edit-1" || p1.body["version"] != p2.body["version"] {
		t.Errorf("patch replay: %s then %s", p1.raw, p2.raw)
	}
	e.must(200, req{method: "DELETE", path: "/v1/entities/note/" + id, header: key("del-1")})
	d2 := e.must(200, req{method: "DELETE", path: "/v1/entities/note/" + id, header: key("del-1")})
	if d2.header.Get(headerReplayed) != "true" || d2.str("operationId") != "del-1" || d2.body["deleted"] != true {
		t.Errorf("delete replay: %s", d2.raw)
	}

	st, err := e.store.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[queue.StatePending] != 3 {
		t.Errorf("pending operations: %d, want 3 (create, update, delete)", st.Counts[queue.StatePending])
	}

	// The key is the account's: another account's request with it
	// conflicts rather than replaying alice's answer.
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"t"}`})
	if r := e.do(req{method: "POST", path: "/v1/entities/note", header: key("press-1"), body: `{"data":{"title":"a","n":1}}`}); r.status != 422 {
		t.Errorf("another account's replay: %d %s", r.status, r.raw)
	}
}

func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	const n = 16
	results := make(chan resp, n)
	for range n {
		go func() {
			results <- e.do(req{method: "POST", path: "/v1/entities/note", header: map[string]string{"Idempotency-Key": "k"}, body: `{"data":{"x":1}}`})
		}()
	}
	replays := 0
	for range n {
		r := <-results
		if r.status != 201 || r.str("operationId") != "k" {
			t.Errorf("answer %d %s", r.status, r.raw)
		}
		if r.header.Get(headerReplayed) == "true" {
			replays++
		}
	}
	if replays != n-1 {
		t.Errorf("%d replays, want %d", replays, n-1)
	}
}

func TestSession(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	r := e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"alice","accessToken":"secret-remote-token"}`})
	if strings.Contains(r.raw, "secret-remote-token") || r.str("accountId") != "alice" {
		t.Errorf("session answer: %s", r.raw)
	}
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"a1","data":{}}`})

	// Entities belong to the session's account.
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"t2"}`})
	e.must(404, req{method: "GET", path: "/v1/entities/note/a1"})
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"a1","data":{"bob":true}}`})
	if l := e.must(200, req{method: "GET", path: "/v1/operations"}); len(l.items()) != 1 || l.items()[0]["accountId"] != "bob" {
		t.Errorf("bob's operations: %s", l.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/operations?account=alice"}); len(l.items()) != 1 || l.items()[0]["accountId"] != "alice" {
		t.Errorf("alice's operations: %s", l.raw)
	}

	// Logout keep: bob's data stays.
	if r := e.must(200, req{method: "DELETE", path: "/v1/session?policy=keep"}); r.body["purged"] != 0.0 {
		t.Errorf("keep: %s", r.raw)
	}
	if st := e.must(200, req{method: "GET", path: "/v1/status"}); st.body["signedIn"] != false {
		t.Errorf("status after logout: %s", st.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/operations"}); len(l.items()) != 2 {
		t.Errorf("signed out, every account's operations: %s", l.raw)
	}

	// Purge: refused while bob has unsynced operations, unless forced.
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"t3"}`})
	e.must(200, req{method: "GET", path: "/v1/entities/note/a1"})
	if r := e.do(req{method: "DELETE", path: "/v1/session?policy=purge"}); r.status != 409 || r.code() != CodeNotPurgeable {
		t.Errorf("purge with unsynced ops: %d %s", r.status, r.raw)
	}
	if acct, ok := e.d.Account(); !ok || acct != "bob" {
		t.Errorf("refused purge signed out: %q %v", acct, ok)
	}
	if r := e.must(200, req{method: "DELETE", path: "/v1/session?policy=purge&force=true"}); r.body["purged"] != 1.0 || r.str("policy") != "purge" {
		t.Errorf("forced purge: %s", r.raw)
	}
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"t4"}`})
	e.must(404, req{method: "GET", path: "/v1/entities/note/a1"})
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"alice","accessToken":"t5"}`})
	e.must(200, req{method: "GET", path: "/v1/entities/note/a1"})
}

func TestOperations(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	c := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{"title":""}}`})
	opID := c.str("operationId")

	op := e.must(200, req{method: "GET", path: "/v1/operations/" + opID})
	if op.str("state") != "pending" || op.str("operationType") != "create" || op.body["payload"] == nil {
		t.Errorf("operation: %s", op.raw)
	}

	e.failOp("alice", opID)
	if got := e.must(200, req{method: "GET", path: "/v1/entities/note/n1"}); got.str("syncState") != "failed" || !strings.Contains(got.str("syncError"), "title is required") {
		t.Errorf("entity after failure: %s", got.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/entities/note?syncState=failed"}); len(l.items()) != 1 {
		t.Errorf("failed entities: %s", l.raw)
	}
	if l := e.must(200, req{method: "GET", path: "/v1/operations?state=permanent_failed"}); len(l.items()) != 1 || l.items()[0]["lastErrorCode"] != "validation" {
		t.Errorf("failed operations: %s", l.raw)
	}

	r := e.must(200, req{method: "POST", path: "/v1/operations/" + opID + "/retry"})
	if r.str("state") != "pending" || r.str("id") != opID {
		t.Errorf("retry: %s", r.raw)
	}
	if got := e.must(200, req{method: "GET", path: "/v1/entities/note/n1"}); got.str("syncState") != "pending" {
		t.Errorf("entity after retry: %s", got.raw)
	}
	if r := e.do(req{method: "POST", path: "/v1/operations/" + opID + "/retry"}); r.status != 409 || r.code() != CodeIllegalTransition {
		t.Errorf("second retry: %d %s", r.status, r.raw)
	}

	e.failOp("alice", opID)
	d := e.must(200, req{method: "POST", path: "/v1/operations/" + opID + "/discard"})
	if d.str("operationId") != opID || d.body["discarded"] != true {
		t.Errorf("discard: %s", d.raw)
	}
	e.must(404, req{method: "GET", path: "/v1/operations/" + opID})
	e.must(404, req{method: "GET", path: "/v1/entities/note/n1"}) // a discarded create takes its entity
	if r := e.do(req{method: "POST", path: "/v1/operations/" + opID + "/discard"}); r.status != 404 || r.code() != CodeNotFound {
		t.Errorf("second discard: %d %s", r.status, r.raw)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{}}`})
	st := e.must(200, req{method: "GET", path: "/v1/status"})
	counts, _ := st.body["counts"].(map[string]any)
	if st.str("accountId") != "alice" || st.body["signedIn"] != true || counts["pending"] != 1.0 {
		t.Errorf("status: %s", st.raw)
	}
}

// fakeDaemon is a hand-written Daemon for unit tests of the API's own
// behaviour.
type fakeDaemon struct {
	account   string
	status    daemon.Status // what Status answers, with AccountID set
	statusErr error
	notified  int
}

func (f *fakeDaemon) Account() (string, bool) { return f.account, f.account != "" }
func (f *fakeDaemon) SetSession(ctx context.Context, a, tok string) error {
	f.account = a
	return nil
}
func (f *fakeDaemon) Logout(ctx context.Context, p daemon.LogoutPolicy, force bool) (int, error) {
	return 0, nil
}
func (f *fakeDaemon) Status(ctx context.Context) (daemon.Status, error) {
	st := f.status
	st.AccountID = f.account
	return st, f.statusErr
}
func (f *fakeDaemon) Notify() { f.notified++ }
func (f *fakeDaemon) AccountWrite(fn func(string) error) error {
	if f.account == "" {
		return daemon.ErrNoSession
	}
	return fn(f.account)
}
func (f *fakeDaemon) Refresh(context.Context, string, string) (queue.Entity, bool, error) {
	return queue.Entity{}, false, daemon.ErrNoRecordRead
}
func (f *fakeDaemon) Versions(context.Context, string, string) ([]transport.Version, error) {
	return nil, daemon.ErrNoVersions
}

// fakeStore answers every call with err.
type fakeStore struct{ err error }

func (f fakeStore) Apply(context.Context, queue.Write) (queue.Result, error) {
	return queue.Result{}, f.err
}
func (f fakeStore) GetEntity(string, string, string) (queue.Entity, error) {
	return queue.Entity{}, f.err
}
func (f fakeStore) ListEntities(string, string, queue.ListOptions) ([]queue.Entity, string, error) {
	return nil, "", f.err
}
func (f fakeStore) GetOperation(string) (queue.Operation, error) { return queue.Operation{}, f.err }
func (f fakeStore) ListOperations(queue.ListOptions) ([]queue.Operation, string, error) {
	return nil, "", f.err
}
func (f fakeStore) Retry(context.Context, string) (queue.Operation, error) {
	return queue.Operation{}, f.err
}
func (f fakeStore) Discard(context.Context, string) error { return f.err }
func (f fakeStore) ApplyBatch(context.Context, []queue.Write, bool) ([]queue.Result, error) {
	return nil, f.err
}

func (f fakeStore) ResolveWith(context.Context, string, string, string, queue.Resolution, string) (queue.Entity, bool, error) {
	return queue.Entity{}, false, f.err
}

func (f fakeStore) AddApp(context.Context, queue.App) (queue.App, error) { return queue.App{}, f.err }
func (f fakeStore) RemoveApp(context.Context, string) error              { return f.err }

// Apps answers none, so that New starts.
func (f fakeStore) Apps() ([]queue.App, error) { return nil, nil }
func (f fakeStore) TypeCounts(string, []string) (map[queue.State]int, map[queue.State]int, error) {
	return nil, nil, f.err
}

// TestInternalErrors: an unexpected error is a 500 with a generic
// message, logged, never shown to the client.
func TestInternalErrors(t *testing.T) {
	t.Parallel()
	secret := errors.New("open /home/alice/.local/share/syncd/syncd.db: input/output error")
	var logged strings.Builder
	s, err := New(Config{
		Daemon: &fakeDaemon{account: "alice", statusErr: secret},
		Store:  fakeStore{err: secret},
		Token:  testToken,
		Logger: newTestLogger(&logged),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/v1/status", ""},
		{"POST", "/v1/entities/note", `{"data":{}}`},
		{"GET", "/v1/entities/note/n1", ""},
		{"GET", "/v1/operations", ""},
		{"POST", "/v1/operations/x/retry", ""},
	} {
		w := serve(s, rq.method, rq.path, rq.body)
		var body errorBody
		json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != 500 || body.Error.Code != CodeInternal || strings.Contains(w.Body.String(), "alice") {
			t.Errorf("%s %s: %d %s", rq.method, rq.path, w.Code, w.Body)
		}
	}
	if !strings.Contains(logged.String(), "input/output error") {
		t.Errorf("internal error not logged: %q", logged.String())
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Token: testToken, Store: fakeStore{}},
		{Daemon: &fakeDaemon{}, Store: fakeStore{}},
		{Daemon: &fakeDaemon{}, Token: testToken},
		{Daemon: &fakeDaemon{}, Store: fakeStore{}, Token: testToken, EntityTypes: []string{"no te"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, ln) }()
	e.url = "http://" + ln.Addr().String()
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{}}`})
	if err := e.srv.Run(ctx, ln); err == nil {
		t.Error("second Run succeeded")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	e.client.Transport.(*http.Transport).CloseIdleConnections()
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("listener still open after Run returned")
	}
}

// TestRunClosesHijacked: connections taken over from the HTTP server (a
// WebSocket) are closed when Run stops; Shutdown alone would not.
func TestRunClosesHijacked(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Daemon: &fakeDaemon{}, Store: fakeStore{}, Token: testToken, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	hijacked := make(chan struct{})
	handlerDone := make(chan struct{})
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		close(hijacked)
		c.Read(make([]byte, 1)) // until Run closes it
		s.hijacked.forget(c)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	<-hijacked
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-handlerDone
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Errorf("hijacked connection still open (read %d bytes)", n)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{}}`})
	r := e.must(200, req{method: "GET", path: "/metrics"})
	if !strings.Contains(r.raw, "offline_queue_depth") {
		t.Errorf("metrics without offline_queue_depth:\n%s", r.raw)
	}
	if r := e.do(req{method: "GET", path: "/metrics", header: map[string]string{"Authorization": ""}}); r.status != 401 {
		t.Errorf("metrics without the token: %d", r.status)
	}
}

// TestNotify: every write that queued work wakes the daemon's workers; a
// replay, which queued nothing, does not.
func TestNotify(t *testing.T) {
	t.Parallel()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{NoSync: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d := &fakeDaemon{account: "alice"}
	s, err := New(Config{Daemon: d, Store: store, Token: testToken, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		method, path, body, key string
		status, notified        int
	}{
		{"POST", "/v1/entities/note", `{"id":"n1","data":{}}`, "k1", 201, 1},
		{"POST", "/v1/entities/note", `{"id":"n1","data":{}}`, "k1", 201, 1}, // replay
		{"PATCH", "/v1/entities/note/n1", `{"data":{"a":1}}`, "", 200, 2},
		{"DELETE", "/v1/entities/note/n1", "", "", 200, 3},
		{"POST", "/v1/entities/note", `{"data":[]}`, "", 400, 3},
	}
	for _, st := range steps {
		r := httptest.NewRequest(st.method, "http://127.0.0.1:7419"+st.path, strings.NewReader(st.body))
		r.Header.Set("Authorization", "Bearer "+testToken)
		if st.body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if st.key != "" {
			r.Header.Set("Idempotency-Key", st.key)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != st.status || d.notified != st.notified {
			t.Errorf("%s %s: status %d, notified %d; want %d, %d", st.method, st.path, w.Code, d.notified, st.status, st.notified)
		}
	}
}

// TestQueueJSONErrors: an error from the queue that wraps a
// *jsonstrict.Error (entity data the queue refused as JSON) is
// 400 invalid_json with its detail, not an internal error.
func TestQueueJSONErrors(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("queue: invalid write: data: %w", &jsonstrict.Error{Kind: jsonstrict.TooDeep, Offset: 300, Detail: "nested deeper than 128"})
	var logged strings.Builder
	s, err := New(Config{Daemon: &fakeDaemon{account: "alice"}, Store: fakeStore{err: refused}, Token: testToken, Logger: newTestLogger(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	w := serve(s, "PATCH", "/v1/entities/note/n1", `{"data":{}}`)
	var body errorBody
	json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 400 || body.Error.Code != CodeInvalidJSON || !strings.Contains(body.Error.Message, "deeper than 128") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if logged.Len() != 0 {
		t.Errorf("logged: %s", logged.String())
	}
}

// fakeBus refuses every subscription with err.
type fakeBus struct{ err error }

func (b fakeBus) Subscribe(uint64, daemon.Filter) (*daemon.Subscription, error) { return nil, b.err }
func (b fakeBus) LastSeq() uint64                                               { return 0 }

// TestDeliberate5xx: the 5xx answers syncd gives on purpose have their
// own codes and messages, and are not logged as internal errors.
func TestDeliberate5xx(t *testing.T) {
	t.Parallel()
	full := fmt.Errorf("queue: apply: %w: the disk is full", queue.ErrStorageFull)
	tests := []struct {
		name       string
		store      Store
		bus        Bus
		shutdown   bool
		method     string
		path, body string
		status     int
		code       string
		inMsg      string
	}{
		{name: "storage full create", store: fakeStore{err: full}, method: "POST", path: "/v1/entities/note", body: `{"data":{}}`, status: 507, code: CodeStorageFull, inMsg: "nothing was written"},
		{name: "storage full retry", store: fakeStore{err: full}, method: "POST", path: "/v1/operations/x/retry", status: 507, code: CodeStorageFull, inMsg: "nothing was written"},
		{name: "too many subscribers", bus: fakeBus{err: fmt.Errorf("%w (limit 256)", daemon.ErrTooManySubscribers)}, method: "GET", path: "/v1/events", status: 503, code: CodeTooManySubscribers, inMsg: "limit 256"},
		{name: "bus closed", bus: fakeBus{err: daemon.ErrBusClosed}, method: "GET", path: "/v1/events", status: 503, code: CodeShuttingDown, inMsg: "shutting down"},
		{name: "shutting down", bus: fakeBus{}, shutdown: true, method: "GET", path: "/v1/events", status: 503, code: CodeShuttingDown, inMsg: "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logged strings.Builder
			store := tt.store
			if store == nil {
				store = fakeStore{}
			}
			s, err := New(Config{Daemon: &fakeDaemon{account: "alice"}, Store: store, Bus: tt.bus, Token: testToken, Logger: newTestLogger(&logged)})
			if err != nil {
				t.Fatal(err)
			}
			if tt.shutdown {
				s.ws.shutdown(0)
			}
			r := httptest.NewRequest(tt.method, "http://127.0.0.1:7419"+tt.path, strings.NewReader(tt.body))
			r.Header.Set("Authorization", "Bearer "+testToken)
			if tt.body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			if tt.path == "/v1/events" {
				r.Header.Set("Connection", "Upgrade")
				r.Header.Set("Upgrade", "websocket")
				r.Header.Set("Sec-WebSocket-Version", "13")
				r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, r)
			var body errorBody
			json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != tt.status || body.Error.Code != tt.code || !strings.Contains(body.Error.Message, tt.inMsg) {
				t.Fatalf("%d %s, want %d %s with %q", w.Code, w.Body, tt.status, tt.code, tt.inMsg)
			}
			if log := logged.String(); strings.Contains(log, "level=ERROR") || strings.Contains(log, "internal") {
				t.Errorf("logged as an internal error: %s", log)
			}
		})
	}
}

// Past the queue size limit a create answers 507 storage_full with the
// limit in its message; /v1/status says the queue is full; a delete
// still works.
func TestQueueFullIs507(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", qcfg: queue.Config{MaxQueueBytes: 64 << 10}})
	body := `{"data":{"text":"` + strings.Repeat("x", 1000) + `"}}`
	var first string
	for i := 0; ; i++ {
		r := e.do(req{method: "POST", path: "/v1/entities/note", body: body})
		if r.status == 507 {
			if r.code() != CodeStorageFull || !strings.Contains(r.raw, "maxQueueBytes") {
				t.Fatalf("507 answer: %s", r.raw)
			}
			break
		}
		if r.status != 201 || i > 1000 {
			t.Fatalf("create %d: %d %s", i, r.status, r.raw)
		}
		if first == "" {
			first = r.str("id")
		}
	}
	st := e.must(200, req{method: "GET", path: "/v1/status"})
	if st.body["queueFull"] != true || st.body["maxQueueBytes"] != float64(64<<10) {
		t.Fatalf("status at the limit: %s", st.raw)
	}
	e.must(200, req{method: "DELETE", path: "/v1/entities/note/" + first})
}
