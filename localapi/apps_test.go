package localapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
)

// addApp registers an app with the admin token and returns its token.
func (e *env) addApp(name string, types []string, readOnly bool) string {
	e.t.Helper()
	body := fmt.Sprintf(`{"name":%q,"types":["%s"],"readOnly":%v}`, name, strings.Join(types, `","`), readOnly)
	r := e.must(http.StatusCreated, req{method: "POST", path: "/v1/apps", body: body})
	token := r.str("token")
	if !regexp.MustCompile(`^syncd_app_[0-9a-f]{64}$`).MatchString(token) {
		e.t.Fatalf("app token %q", token)
	}
	return token
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// An app token reaches only its entity types, on every route that takes
// one; another app's operations do not exist for it; the admin routes
// refuse it; a read-only one writes nothing; and no refused request
// writes anything. Every route of the API is in the table.
func TestAppTokenScopes(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct"})
	noteOp := e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{"a":1}}`}).str("operationId")
	taskOp := e.must(http.StatusCreated, req{method: "POST", path: "/v1/entities/task", body: `{"id":"t1","data":{"a":1}}`}).str("operationId")
	e.failOp("acct", noteOp)
	e.failOp("acct", taskOp)
	notes := e.addApp("notes", []string{"note"}, false)
	reader := e.addApp("reader", []string{"note"}, true)

	type row struct {
		token, method, path, body string
		status                    int
		code                      string
	}
	const (
		write = `{"data":{"b":2}}`
		batch = `{"writes":[{"op":"create","type":"note","data":{}},{"op":"update","type":"task","id":"t1","data":{}}]}`
	)
	refused := []row{
		// Another app's type, on every route that names one.
		{notes, "GET", "/v1/entities/task", "", 403, CodeTypeNotGranted},
		{notes, "GET", "/v1/entities/task/t1", "", 403, CodeTypeNotGranted},
		{notes, "POST", "/v1/entities/task", write, 403, CodeTypeNotGranted},
		{notes, "PATCH", "/v1/entities/task/t1", write, 403, CodeTypeNotGranted},
		{notes, "DELETE", "/v1/entities/task/t1", "", 403, CodeTypeNotGranted},
		{notes, "POST", "/v1/entities/task/t1/resolve", `{"take":"server"}`, 403, CodeTypeNotGranted},
		{notes, "POST", "/v1/entities/task/t1/refresh", "", 403, CodeTypeNotGranted},
		{notes, "GET", "/v1/entities/task/t1/versions", "", 403, CodeTypeNotGranted},
		{notes, "POST", "/v1/batch", batch, 403, CodeTypeNotGranted},
		{notes, "GET", "/v1/operations/" + taskOp, "", 404, CodeNotFound},
		{notes, "POST", "/v1/operations/" + taskOp + "/retry", "", 404, CodeNotFound},
		{notes, "POST", "/v1/operations/" + taskOp + "/discard", "", 404, CodeNotFound},
		{notes, "GET", "/v1/events?entityType=task", "", 403, CodeTypeNotGranted},
		// The admin routes.
		{notes, "PUT", "/v1/session", `{"accountId":"mallory","accessToken":"x"}`, 403, CodeAdminRequired},
		{notes, "DELETE", "/v1/session?policy=purge&force=true", "", 403, CodeAdminRequired},
		{notes, "POST", "/v1/apps", `{"name":"evil","types":["task"]}`, 403, CodeAdminRequired},
		{notes, "GET", "/v1/apps", "", 403, CodeAdminRequired},
		{notes, "DELETE", "/v1/apps/reader", "", 403, CodeAdminRequired},
		{notes, "GET", "/metrics", "", 403, CodeAdminRequired},
		{notes, "GET", "/v1/status/history", "", 403, CodeAdminRequired},
		{notes, "POST", "/v1/ui/links", "", 403, CodeAdminRequired},
		// A read-only token, on its own type.
		{reader, "POST", "/v1/entities/note", write, 403, CodeReadOnly},
		{reader, "PATCH", "/v1/entities/note/n1", write, 403, CodeReadOnly},
		{reader, "DELETE", "/v1/entities/note/n1", "", 403, CodeReadOnly},
		{reader, "POST", "/v1/entities/note/n1/resolve", `{"take":"server"}`, 403, CodeReadOnly},
		{reader, "POST", "/v1/entities/note/n1/refresh", "", 403, CodeReadOnly},
		{reader, "POST", "/v1/batch", `{"writes":[{"op":"create","type":"note","data":{}}]}`, 403, CodeReadOnly},
		{reader, "POST", "/v1/operations/" + noteOp + "/retry", "", 403, CodeReadOnly},
		{reader, "POST", "/v1/operations/" + noteOp + "/discard", "", 403, CodeReadOnly},
		// A token no app has, or the admin token's digest as a token.
		{"syncd_app_" + strings.Repeat("0", 64), "GET", "/v1/entities/note", "", 401, CodeUnauthorized},
	}
	allowed := []row{
		{notes, "GET", "/v1/entities/note", "", 200, ""},
		{notes, "GET", "/v1/entities/note/n1", "", 200, ""},
		{notes, "GET", "/v1/operations", "", 200, ""},
		{notes, "GET", "/v1/operations/" + noteOp, "", 200, ""},
		{notes, "GET", "/v1/status", "", 200, ""},
		{notes, "GET", "/v1/openapi.json", "", 200, ""},
		{notes, "GET", "/v1/events", "", 426, CodeUpgradeRequired}, // past the guard; localapi_test streams events
		{reader, "GET", "/v1/entities/note/n1", "", 200, ""},
		{reader, "GET", "/v1/operations/" + noteOp, "", 200, ""},
	}

	before := e.snapshot()
	for _, rw := range refused {
		r := e.do(req{method: rw.method, path: rw.path, body: rw.body, header: bearer(rw.token)})
		if r.status != rw.status || r.code() != rw.code {
			t.Errorf("%s %s: %d %s, want %d %s: %s", rw.method, rw.path, r.status, r.code(), rw.status, rw.code, r.raw)
		}
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("refused requests wrote: before %+v, after %+v", before, after)
	}
	for _, rw := range allowed {
		r := e.do(req{method: rw.method, path: rw.path, body: rw.body, header: bearer(rw.token)})
		if r.status != rw.status || r.code() != rw.code {
			t.Errorf("%s %s: %d %s, want %d %s: %s", rw.method, rw.path, r.status, r.code(), rw.status, rw.code, r.raw)
		}
	}

	// Every route is in the table.
	mux := http.NewServeMux()
	for _, r := range e.srv.routeTable() {
		mux.Handle(r.pattern, r.h)
	}
	covered := map[string]bool{}
	for _, rw := range slices.Concat(refused, allowed) {
		_, pattern := mux.Handler(httptest.NewRequest(rw.method, rw.path, nil))
		covered[pattern] = true
	}
	for _, r := range e.srv.routeTable() {
		if !covered[r.pattern] {
			t.Errorf("route %s is not in the table", r.pattern)
		}
	}

	// What the app reads is its own: its operations, its counts.
	ops := e.must(200, req{method: "GET", path: "/v1/operations", header: bearer(notes)}).items()
	if len(ops) != 1 || ops[0]["entityType"] != "note" {
		t.Errorf("the notes app lists %v", ops)
	}
	st := e.must(200, req{method: "GET", path: "/v1/status", header: bearer(notes)})
	jsonEq(t, st.body["counts"], `{"pending":0,"sending":0,"retry_waiting":0,"done":0,"permanent_failed":1}`)
	jsonEq(t, st.body["accountCounts"], `{"pending":0,"sending":0,"retry_waiting":0,"done":0,"permanent_failed":1}`)
	jsonEq(t, st.body["app"], `{"name":"notes","types":["note"],"readOnly":false}`)
	if st.body["apps"] != nil {
		t.Errorf("an app's status shows every app's counts: %v", st.body["apps"])
	}
	admin := e.must(200, req{method: "GET", path: "/v1/status"})
	jsonEq(t, admin.body["counts"], `{"pending":0,"sending":0,"retry_waiting":0,"done":0,"permanent_failed":2}`)
	if admin.body["app"] != nil {
		t.Errorf("the admin's status has an app: %v", admin.body["app"])
	}
}

// An app's writes carry its name to their operations, in the answer, the
// operation list and the per-app counts of the admin's status; the admin
// token's writes carry none.
func TestAppWritesAreAudited(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct"})
	notes := e.addApp("notes", []string{"note", "tag"}, false)
	op := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":1}}`, header: bearer(notes)}).str("operationId")
	b := e.must(200, req{method: "POST", path: "/v1/batch", body: `{"writes":[{"op":"create","type":"tag","data":{}},{"op":"create","type":"note","data":{}}]}`, header: bearer(notes)})
	if len(b.body["results"].([]any)) != 2 {
		t.Fatalf("batch: %s", b.raw)
	}
	adminOp := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":2}}`}).str("operationId")

	if got := e.must(200, req{method: "GET", path: "/v1/operations/" + op}).str("app"); got != "notes" {
		t.Errorf("operation made with the notes token: app %q", got)
	}
	if got := e.must(200, req{method: "GET", path: "/v1/operations/" + adminOp}); got.body["app"] != nil {
		t.Errorf("operation made with the admin token: app %v", got.body["app"])
	}
	st := e.must(200, req{method: "GET", path: "/v1/status"})
	jsonEq(t, st.body["apps"], `{"notes":{"pending":3}}`)
	// The notes app sees the admin's write of its type too: the grant is
	// on types, the audit on who wrote.
	if n := len(e.must(200, req{method: "GET", path: "/v1/operations", header: bearer(notes)}).items()); n != 4 {
		t.Errorf("notes lists %d operations, want 4", n)
	}
}

// An app acting on an operation it may not have made (retry, discard)
// is logged with its name.
func TestAppActionsAreLogged(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	e := setup(t, envOptions{account: "acct", cfg: Config{Logger: newTestLogger(&logs)}})
	notes := e.addApp("notes", []string{"note"}, false)
	op := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":1}}`}).str("operationId")
	e.failOp("acct", op)
	e.must(200, req{method: "POST", path: "/v1/operations/" + op + "/retry", header: bearer(notes)})
	e.failOp("acct", op)
	e.must(200, req{method: "POST", path: "/v1/operations/" + op + "/discard", header: bearer(notes)})
	for _, want := range []string{"app=notes action=retry operation=" + op, "app=notes action=discard operation=" + op} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// POST /v1/apps refuses bad grants, names taken and types the daemon is
// not configured for; the list never shows a token; removing an app
// revokes its token at the next request.
func TestAppManagement(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct", cfg: Config{EntityTypes: []string{"note", "task"}}})
	token := e.addApp("notes", []string{"note"}, false)
	for _, tt := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"name":"notes","types":["task"]}`, 409, CodeAppExists},
		{`{"name":"x","types":[]}`, 400, CodeInvalidRequest},
		{`{"name":"x","types":["note","note"]}`, 400, CodeInvalidRequest},
		{`{"name":"x","types":["photo"]}`, 400, CodeInvalidRequest},
		{`{"name":"x","types":["a b"]}`, 400, CodeInvalidRequest},
		{`{"name":"../x","types":["note"]}`, 400, CodeInvalidRequest},
		{`{"name":"x"}`, 400, CodeInvalidRequest},
		{`{"name":"x","types":["note"],"admin":true}`, 400, CodeInvalidRequest},
		{`{"name":"x","types":"note"}`, 400, CodeInvalidRequest},
	} {
		r := e.do(req{method: "POST", path: "/v1/apps", body: tt.body})
		if r.status != tt.status || r.code() != tt.code {
			t.Errorf("POST /v1/apps %s: %d %s, want %d %s", tt.body, r.status, r.code(), tt.status, tt.code)
		}
	}
	list := e.must(200, req{method: "GET", path: "/v1/apps"})
	if strings.Contains(list.raw, "token") || len(list.items()) != 1 {
		t.Errorf("app list: %s", list.raw)
	}
	e.must(200, req{method: "GET", path: "/v1/entities/note", header: bearer(token)})
	e.must(200, req{method: "DELETE", path: "/v1/apps/notes"})
	if r := e.do(req{method: "GET", path: "/v1/entities/note", header: bearer(token)}); r.status != 401 || r.code() != CodeUnauthorized {
		t.Errorf("revoked token: %d %s", r.status, r.code())
	}
	e.must(404, req{method: "DELETE", path: "/v1/apps/notes"})
	if r := e.do(req{method: "DELETE", path: "/v1/apps/a%2Fb"}); r.status != 400 {
		t.Errorf("DELETE /v1/apps/a%%2Fb: %d", r.status)
	}
}

// Apps survive a restart of the server: the grants are read from the
// store at New.
func TestAppsAreLoadedAtStart(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct"})
	token := e.addApp("notes", []string{"note"}, true)
	s2, err := New(Config{Daemon: e.d, Token: testToken, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "http://127.0.0.1:7419/v1/entities/task", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	s2.Handler().ServeHTTP(w, r)
	if w.Code != 403 || !strings.Contains(w.Body.String(), CodeTypeNotGranted) {
		t.Errorf("a new server with the stored app: %d %s", w.Code, w.Body)
	}
}

// Adds and removes of the same names racing leave no grant behind: once
// every app is removed, no token made meanwhile opens anything. (The
// store and the table were changed apart; a grant could outlive its
// app, and no DELETE could reach it.)
func TestAppAddRemoveRace(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct"})
	var (
		mu     sync.Mutex
		tokens []string
		wg     sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				name := fmt.Sprintf("r%d", (w+i)%2)
				if (w+i)%3 == 0 {
					e.do(req{method: "DELETE", path: "/v1/apps/" + name})
					continue
				}
				if r := e.do(req{method: "POST", path: "/v1/apps", body: `{"name":"` + name + `","types":["note"]}`}); r.status == http.StatusCreated {
					mu.Lock()
					tokens = append(tokens, r.str("token"))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{"r0", "r1"} {
		e.do(req{method: "DELETE", path: "/v1/apps/" + name})
	}
	if len(tokens) == 0 {
		t.Fatal("no app was added")
	}
	for _, tok := range tokens {
		if r := e.do(req{method: "GET", path: "/v1/status", header: bearer(tok)}); r.status != http.StatusUnauthorized {
			t.Fatalf("a token of a removed app: %d %s", r.status, r.raw)
		}
	}
}

// A write authorised before its app was removed, whose body arrives
// after the removal answered, is refused and writes nothing.
func TestRevocationWaitsForWritesInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "acct"})
	token := e.addApp("slow", []string{"note"}, false)
	reading := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The guard has passed when the handler reads the body.
		r.Body = &signalReader{ReadCloser: r.Body, first: reading}
		e.srv.Handler().ServeHTTP(w, r)
	}))
	defer hs.Close()
	pr, pw := io.Pipe()
	hr, _ := http.NewRequest("POST", hs.URL+"/v1/entities/note", pr)
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("Content-Type", "application/json")
	done := make(chan *http.Response, 1)
	go func() {
		res, err := http.DefaultTransport.RoundTrip(hr)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-reading
	before := e.snapshot()
	e.must(200, req{method: "DELETE", path: "/v1/apps/slow"})
	pw.Write([]byte(`{"id":"late","data":{}}`))
	pw.Close()
	res := <-done
	if res == nil {
		return
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the late write: %d, want 401", res.StatusCode)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("the late write wrote: before %+v, after %+v", before, after)
	}
	if _, err := e.store.GetEntity("acct", "note", "late"); err == nil {
		t.Error("the entity of the late write exists")
	}
}

// signalReader closes first at the body's first read.
type signalReader struct {
	io.ReadCloser
	first chan struct{}
	once  sync.Once
}

func (s *signalReader) Read(p []byte) (int, error) {
	s.once.Do(func() { close(s.first) })
	return s.ReadCloser.Read(p)
}

// An app token reaches the signed-in account's operations only; what
// another account left queued does not exist for it.
func TestAppTokenIsScopedToTheSignedInAccount(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	token := e.addApp("notes", []string{"note"}, false)
	aliceOp := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":1}}`, header: bearer(token)}).str("operationId")
	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"bob.1"}`})
	bobOp := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"data":{"b":1}}`, header: bearer(token)}).str("operationId")

	ops := e.must(200, req{method: "GET", path: "/v1/operations", header: bearer(token)}).items()
	if len(ops) != 1 || ops[0]["id"] != bobOp {
		t.Errorf("the app lists %v, want bob's operation only", ops)
	}
	if r := e.do(req{method: "GET", path: "/v1/operations?account=alice", header: bearer(token)}); r.status != 403 || r.code() != CodeAccountNotGranted {
		t.Errorf("?account=alice: %d %s", r.status, r.raw)
	}
	for _, p := range []string{"/v1/operations/" + aliceOp, "/v1/operations/" + aliceOp + "/discard"} {
		method := "GET"
		if strings.HasSuffix(p, "discard") {
			method = "POST"
		}
		if r := e.do(req{method: method, path: p, header: bearer(token)}); r.status != 404 {
			t.Errorf("%s %s (alice's): %d %s", method, p, r.status, r.raw)
		}
	}
	// The admin token sees both.
	if n := len(e.must(200, req{method: "GET", path: "/v1/operations?account=alice"}).items()); n != 1 {
		t.Errorf("admin lists %d of alice's", n)
	}
	e.must(200, req{method: "DELETE", path: "/v1/session"})
	if ops := e.must(200, req{method: "GET", path: "/v1/operations", header: bearer(token)}).items(); len(ops) != 0 {
		t.Errorf("signed out, the app lists %v", ops)
	}
}

// An app token's status does not show what the daemon saw of a
// misconfigured remote: it names other apps' requests.
func TestAppStatusRedactsTheRemoteProblem(t *testing.T) {
	t.Parallel()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{NoSync: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	seen := "PATCH http://127.0.0.1:9/v1/task/774fd083 was answered 307"
	d := &fakeDaemon{account: "acct", status: daemon.Status{RemoteProblem: &daemon.RemoteProblem{Kind: "redirect", Seen: seen, Fix: "set the URL"}}}
	s, err := New(Config{Daemon: d, Store: store, Token: testToken, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w := serve(s, "POST", "/v1/apps", `{"name":"notes","types":["note"]}`)
	var a struct{ Token string }
	json.Unmarshal(w.Body.Bytes(), &a)
	r := httptest.NewRequest("GET", "http://127.0.0.1:7419/v1/status", nil)
	r.Header.Set("Authorization", "Bearer "+a.Token)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, r)
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "v1/task") || !strings.Contains(rec.Body.String(), "set the URL") {
		t.Errorf("an app's status: %d %s", rec.Code, rec.Body)
	}
	if w := serve(s, "GET", "/v1/status", ""); !strings.Contains(w.Body.String(), "v1/task") {
		t.Errorf("the admin's status lacks what was seen: %s", w.Body)
	}
}
