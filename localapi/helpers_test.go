package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// env is a real API over a real queue in a temporary directory, served
// on loopback.
type env struct {
	t      testing.TB
	store  *queue.Store
	d      *daemon.Daemon
	srv    *Server
	url    string
	client *http.Client
}

type envOptions struct {
	cfg     Config
	qcfg    queue.Config
	account string // signed in as this account unless empty
	durable bool   // fsync (the default for tests is NoSync)
}

// setup starts an env. At cleanup it stops the server, checks the
// queue's invariants and closes it.
func setup(t testing.TB, o envOptions) *env {
	t.Helper()
	qcfg := o.qcfg
	qcfg.NoSync = !o.durable
	qcfg.Logger = discardLogger()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), qcfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{Store: store, Logger: discardLogger()})
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	cfg := o.cfg
	cfg.Daemon = d
	cfg.Token = testToken
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	srv, err := New(cfg)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	e := &env{t: t, store: store, d: d, srv: srv, url: hs.URL, client: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		hs.Close()
		if err := store.Check(); err != nil {
			t.Errorf("queue invariants after test: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	if o.account != "" {
		if err := d.SetSession(context.Background(), o.account, "remote-token-"+o.account); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// req is one request; zero fields mean: the right token, JSON content
// type when there is a body.
type req struct {
	method, path, body string
	header             map[string]string // "" value deletes the header
	host               string
}

// resp is a decoded answer.
type resp struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (r resp) code() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

func (r resp) message() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["message"].(string)
		return s
	}
	return ""
}

func (r resp) str(key string) string { s, _ := r.body[key].(string); return s }

func (r resp) items() []map[string]any {
	raw, _ := r.body["items"].([]any)
	out := make([]map[string]any, len(raw))
	for i, v := range raw {
		out[i], _ = v.(map[string]any)
	}
	return out
}

// do sends rq and checks what every answer must have: the security
// headers, and a JSON body ({"error":{code,message}} on errors).
func (e *env) do(rq req) resp {
	e.t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	hr, err := http.NewRequest(rq.method, e.url+rq.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+testToken)
	if rq.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range rq.header {
		if v == "" {
			hr.Header.Del(k)
		} else {
			hr.Header.Set(k, v)
		}
	}
	if rq.host != "" {
		hr.Host = rq.host
	}
	res, err := e.client.Do(hr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	out := resp{status: res.StatusCode, header: res.Header, raw: string(raw)}
	for _, kv := range securityHeaders {
		if got := res.Header.Get(kv[0]); got != kv[1] {
			e.t.Errorf("%s %s: header %s = %q, want %q", rq.method, rq.path, kv[0], got, kv[1])
		}
	}
	if res.StatusCode == http.StatusNoContent {
		return out
	}
	if rq.path == "/metrics" && res.StatusCode == http.StatusOK {
		return out
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q, want application/json", rq.method, rq.path, ct)
	}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		e.t.Fatalf("%s %s: answer is not a JSON object: %v: %s", rq.method, rq.path, err, raw)
	}
	if res.StatusCode >= 400 && (out.code() == "" || out.message() == "") {
		e.t.Errorf("%s %s: error answer without code or message: %s", rq.method, rq.path, raw)
	}
	return out
}

// must sends rq and fails the test unless the status is want.
func (e *env) must(want int, rq req) resp {
	e.t.Helper()
	r := e.do(rq)
	if r.status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", rq.method, rq.path, r.status, want, r.raw)
	}
	return r
}

// snapshot is what the queue holds, to show a refused request wrote
// nothing.
type snapshot struct {
	seq    uint64
	counts map[queue.State]int
	sess   string
}

func (e *env) snapshot() snapshot {
	e.t.Helper()
	seq, err := e.store.LastEventSeq()
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := e.store.Stats()
	if err != nil {
		e.t.Fatal(err)
	}
	sess, err := e.store.LoadSession()
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := json.Marshal(sess)
	return snapshot{seq: seq, counts: st.Counts, sess: string(b)}
}

func (a snapshot) equal(b snapshot) bool {
	if a.seq != b.seq || a.sess != b.sess || len(a.counts) != len(b.counts) {
		return false
	}
	for k, v := range a.counts {
		if b.counts[k] != v {
			return false
		}
	}
	return true
}

// failOp drives an operation to permanent_failed the way a worker would:
// claim it, then record a permanent failure.
func (e *env) failOp(account, opID string) {
	e.t.Helper()
	ctx := context.Background()
	op, err := e.store.Claim(ctx, account, "test-worker", 60e9)
	if err != nil {
		e.t.Fatal(err)
	}
	if op.ID != opID {
		e.t.Fatalf("claimed %s, want %s", op.ID, opID)
	}
	if err := e.store.Fail(ctx, op.ID, "test-worker", "validation", "title is required", false); err != nil {
		e.t.Fatal(err)
	}
}

func jsonEq(t testing.TB, got any, want string) {
	t.Helper()
	g, _ := json.Marshal(got)
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	wb, _ := json.Marshal(w)
	if !bytes.Equal(g, wb) {
		t.Errorf("got %s, want %s", g, wb)
	}
}

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: w}, nil))
}

// lockedWriter serialises writes to a strings.Builder shared with the
// test.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serve runs one request through s's handler in memory, with the token.
func serve(s *Server, method, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://127.0.0.1:7419"+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}
