package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/boltstore"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/pgstore"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { removeBuild() }))
}

// backend is one storage the tests run against.
type backend struct {
	name   string
	config func(t *testing.T) Config
}

var backends = []backend{
	{"bbolt", func(t *testing.T) Config { return Config{Path: filepath.Join(t.TempDir(), "remote.db")} }},
	{"postgres", func(t *testing.T) Config { return Config{PostgresDSN: idempotencytest.PostgresDSN(t)} }},
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// harness is a server on real HTTP over loopback and a client for it.
type harness struct {
	srv    *Server
	url    string
	client *http.Client
}

func setup(t *testing.T, cfg Config) *harness {
	t.Helper()
	if len(cfg.Tokens) == 0 {
		cfg.DevTokens = true
	}
	if cfg.InFlightWait == 0 {
		cfg.InFlightWait = time.Minute
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		hs.Close()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &harness{srv: s, url: hs.URL, client: &http.Client{Transport: tr}}
}

type result struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

// do sends a request; key "" sends none. It must not call t.Fatal, as
// goroutines use it.
func (h *harness) do(method, path, token, key, body string) (result, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		return result{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header.Get(idempotency.HeaderReplayed) == "true", resp.Header}, err
}

func (h *harness) must(t *testing.T, method, path, token, key, body string) result {
	t.Helper()
	r, err := h.do(method, path, token, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func entityOf(t *testing.T, r result) Entity {
	t.Helper()
	var e Entity
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("answer %d %q is not an entity: %v", r.status, r.body, err)
	}
	return e
}

func codeOf(t *testing.T, r result) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("answer %d %q is not an error body", r.status, r.body)
	}
	return e.Error.Code
}

func (h *harness) count(t *testing.T, actor, typ, clientID string) int {
	t.Helper()
	n, err := h.srv.Count(context.Background(), actor, typ, clientID)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newKey() string { return uuid.NewString() }

func TestEntityRoutes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := idempotencytest.NewClock(time.Date(2026, 1, 13, 0, 10, 0, 123456789, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW} // record-level: today's rule
		h := setup(t, cfg)
		const tok = "alice.1"

		created := h.must(t, "POST", "/v1/notes", tok, newKey(), `{"clientId":"local-1","data":{"b":2, "a":1},"payloadVersion":1}`)
		if created.status != http.StatusCreated || created.replayed {
			t.Fatalf("create: %d %s", created.status, created.body)
		}
		e := entityOf(t, created)
		if _, err := uuid.Parse(e.ID); err != nil || e.ClientID != "local-1" || e.Type != "notes" || string(e.Data) != `{"b":2,"a":1}` ||
			e.PayloadVersion != 1 || !e.CreatedAt.Equal(time.Date(2026, 1, 13, 0, 10, 0, 123456000, time.UTC)) || e.Deleted {
			t.Fatalf("created entity = %+v", e)
		}
		if loc := created.header.Get("Location"); loc != "/v1/notes/"+e.ID {
			t.Fatalf("Location = %q", loc)
		}

		// A new key for an existing clientId: the existing record, 200.
		again := h.must(t, "POST", "/v1/notes", tok, newKey(), `{"clientId":"local-1","data":{"other":true},"payloadVersion":1}`)
		if again.status != http.StatusOK || entityOf(t, again).ID != e.ID {
			t.Fatalf("create of an existing clientId: %d %s", again.status, again.body)
		}
		// The same clientId under another type or actor is another record.
		if r := h.must(t, "POST", "/v1/tasks", tok, newKey(), `{"clientId":"local-1","data":{}}`); r.status != http.StatusCreated {
			t.Fatalf("other type: %d", r.status)
		}
		if r := h.must(t, "POST", "/v1/notes", "bob", newKey(), `{"clientId":"local-1","data":{}}`); r.status != http.StatusCreated {
			t.Fatalf("other actor: %d", r.status)
		}

		get := h.must(t, "GET", "/v1/notes/"+e.ID, tok, "", "")
		if get.status != http.StatusOK || get.body != created.body {
			t.Fatalf("get: %d %s, want %s", get.status, get.body, created.body)
		}
		if r := h.must(t, "GET", "/v1/notes/"+e.ID, "bob", "", ""); r.status != http.StatusNotFound || codeOf(t, r) != CodeNotFound {
			t.Fatalf("get by another actor: %d %s", r.status, r.body)
		}
		list := h.must(t, "GET", "/v1/notes?clientId=local-1", tok, "", "")
		if list.status != http.StatusOK || !strings.Contains(list.body, e.ID) {
			t.Fatalf("list: %d %s", list.status, list.body)
		}
		if r := h.must(t, "GET", "/v1/notes?clientId=nope", tok, "", ""); r.body != "{\"items\":[]}\n" {
			t.Fatalf("empty list: %s", r.body)
		}

		clock.Advance(time.Second)
		upd := h.must(t, "PATCH", "/v1/notes/"+e.ID, tok, newKey(), `{"data":{"a":3},"payloadVersion":3}`)
		ue := entityOf(t, upd)
		if upd.status != http.StatusOK || string(ue.Data) != `{"a":3}` || ue.PayloadVersion != 3 || !ue.UpdatedAt.After(ue.CreatedAt) {
			t.Fatalf("update: %d %s", upd.status, upd.body)
		}
		if ue.Version != 2 || ue.OperationID == "" {
			t.Fatalf("update's version %d, operationId %q", ue.Version, ue.OperationID)
		}
		// A lower payloadVersion (another device counts its own) is
		// applied: last writer wins, nothing dropped silently.
		other := h.must(t, "PATCH", "/v1/notes/"+e.ID, tok, newKey(), `{"data":{"a":2},"payloadVersion":2}`)
		if oe := entityOf(t, other); other.status != http.StatusOK || string(oe.Data) != `{"a":2}` || oe.Version != 3 {
			t.Fatalf("another device's update: %d %s", other.status, other.body)
		}

		del := h.must(t, "DELETE", "/v1/notes/"+e.ID, tok, newKey(), "")
		de := entityOf(t, del)
		if del.status != http.StatusOK || !de.Deleted || de.DeletedAt == nil || de.Version != 4 {
			t.Fatalf("delete: %d %s", del.status, del.body)
		}
		if r := h.must(t, "GET", "/v1/notes/"+e.ID, tok, "", ""); !entityOf(t, r).Deleted {
			t.Fatalf("get after delete: %s", r.body)
		}
		if r := h.must(t, "DELETE", "/v1/notes/"+e.ID, tok, newKey(), ""); r.status != http.StatusOK || !entityOf(t, r).Deleted {
			t.Fatalf("second delete: %d %s", r.status, r.body)
		}
		if r := h.must(t, "PATCH", "/v1/notes/"+e.ID, tok, newKey(), `{"data":{},"payloadVersion":9}`); r.status != http.StatusGone || codeOf(t, r) != CodeGone {
			t.Fatalf("update after delete: %d %s", r.status, r.body)
		}
		if n := h.count(t, "alice", "notes", "local-1"); n != 1 {
			t.Fatalf("count = %d", n)
		}
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		missing := "/v1/notes/" + uuid.NewString()
		tests := []struct {
			name, method, path, token, key, body string
			status                               int
			code                                 string
		}{
			{"no token", "POST", "/v1/notes", "", newKey(), `{"clientId":"c","data":{}}`, 401, CodeUnauthorized},
			{"no token on GET", "GET", "/v1/notes", "", "", "", 401, CodeUnauthorized},
			{"empty dev actor", "GET", "/v1/notes", ".x", "", "", 401, CodeUnauthorized},
			{"no key", "POST", "/v1/notes", "alice", "", `{"clientId":"c","data":{}}`, 400, idempotency.CodeKeyMissing},
			{"no key on PATCH", "PATCH", missing, "alice", "", `{"data":{}}`, 400, idempotency.CodeKeyMissing},
			{"no key on DELETE", "DELETE", missing, "alice", "", "", 400, idempotency.CodeKeyMissing},
			{"data not an object", "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":[1]}`, 400, CodeValidation},
			{"data missing", "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c"}`, 400, CodeValidation},
			{"invalid test hook", "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{"invalid":true}}`, 400, CodeValidation},
			{"no clientId", "POST", "/v1/notes", "alice", newKey(), `{"data":{}}`, 400, CodeValidation},
			{"bad JSON", "POST", "/v1/notes", "alice", newKey(), `{"clientId":`, 400, CodeValidation},
			// Ambiguous JSON is refused by the gate, the same on both
			// storages (PostgreSQL used to answer 500, bbolt to accept).
			{"invalid UTF-8 in data", "POST", "/v1/notes", "alice", newKey(), "{\"clientId\":\"c\",\"data\":{\"t\":\"\xff\"}}", 400, idempotency.CodeBadRequest},
			{"lone surrogate in data", "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{"t":"\ud800"}}`, 400, idempotency.CodeBadRequest},
			{"repeated name", "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","clientId":"d","data":{}}`, 400, idempotency.CodeBadRequest},
			{"bad type", "POST", "/v1/no%20tes", "alice", newKey(), `{"clientId":"c","data":{}}`, 400, CodeValidation},
			{"update unknown id", "PATCH", missing, "alice", newKey(), `{"data":{}}`, 404, CodeNotFound},
			{"delete unknown id", "DELETE", missing, "alice", newKey(), "", 404, CodeNotFound},
			{"get unknown id", "GET", missing, "alice", "", "", 404, CodeNotFound},
			{"unknown route", "GET", "/nope", "", "", "", 404, CodeNotFound},
		}
		for _, tt := range tests {
			r := h.must(t, tt.method, tt.path, tt.token, tt.key, tt.body)
			if r.status != tt.status || codeOf(t, r) != tt.code {
				t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
			}
		}
		if es, err := h.srv.Entities(context.Background(), "alice", "notes", ""); err != nil || len(es) != 0 {
			t.Fatalf("entities after refused requests: %v %v", es, err)
		}
		// "invalid": false is an ordinary field.
		if r := h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{"invalid":false}}`); r.status != 201 {
			t.Fatalf("invalid:false: %d %s", r.status, r.body)
		}
	})
}

// TestKeyReused: the same key with another body answers 422 and writes
// no second record.
func TestKeyReused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		key := newKey()
		if r := h.must(t, "POST", "/v1/notes", "alice", key, `{"clientId":"a","data":{"v":120}}`); r.status != 201 {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		for _, body := range []string{`{"clientId":"a","data":{"v":999}}`, `{"clientId":"b","data":{"v":120}}`} {
			r := h.must(t, "POST", "/v1/notes", "alice", key, body)
			if r.status != http.StatusUnprocessableEntity || codeOf(t, r) != idempotency.CodeKeyReused {
				t.Fatalf("reused key: %d %s", r.status, r.body)
			}
		}
		if n, m := h.count(t, "alice", "notes", "a"), h.count(t, "alice", "notes", "b"); n != 1 || m != 0 {
			t.Fatalf("records a=%d b=%d, want 1 0", n, m)
		}
		e, _ := h.srv.Entities(context.Background(), "alice", "notes", "a")
		if string(e[0].Data) != `{"v":120}` {
			t.Fatalf("data = %s", e[0].Data)
		}
		metrics := h.must(t, "GET", "/metrics", "", "", "").body
		if !strings.Contains(metrics, "idempotency_conflicts_total 2") {
			t.Fatalf("metrics:\n%s", metrics)
		}
	})
}

// TestDevTokenRefreshKeepsScope: "alice.1" and "alice.2" are one actor,
// so a resend after a token refresh replays; "bob.1" is another.
func TestDevTokenRefreshKeepsScope(t *testing.T) {
	t.Parallel()
	h := setup(t, backends[0].config(t))
	key, body := newKey(), `{"clientId":"c","data":{}}`
	first := h.must(t, "POST", "/v1/notes", "alice.1", key, body)
	again := h.must(t, "POST", "/v1/notes", "alice.2", key, body)
	bob := h.must(t, "POST", "/v1/notes", "bob.1", key, body)
	if first.status != 201 || !again.replayed || again.body != first.body || bob.replayed || bob.status != 201 {
		t.Fatalf("first %d, refreshed %d replayed=%v, bob %d replayed=%v", first.status, again.status, again.replayed, bob.status, bob.replayed)
	}
	metrics := h.must(t, "GET", "/metrics", "", "", "").body
	if !strings.Contains(metrics, `idempotency_replays_total{operation="create"} 1`) {
		t.Fatalf("metrics:\n%s", metrics)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := writeFile(path, "# token actor\nsecret-a alice\n\nsecret-b  bob\n"); err != nil {
		t.Fatal(err)
	}
	tokens, err := ReadTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := backends[0].config(t)
	cfg.Tokens = tokens
	h := setup(t, cfg)
	tests := []struct {
		token  string
		status int
	}{{"secret-a", 201}, {"secret-b", 201}, {"alice", 401}, {"secret-a.x", 401}, {"", 401}}
	for _, tt := range tests {
		r := h.must(t, "POST", "/v1/notes", tt.token, newKey(), `{"clientId":"`+newKey()+`","data":{}}`)
		if r.status != tt.status {
			t.Errorf("token %q: %d %s, want %d", tt.token, r.status, r.body, tt.status)
		}
	}
	if err := writeFile(path, "only-one-field\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokensFile(path); err == nil {
		t.Fatal("a malformed tokens file was accepted")
	}
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"no auth", Config{DataDir: dir}, ErrNoAuth},
		{"no storage", Config{DevTokens: true}, ErrNoStorage},
		{"two storages", Config{DevTokens: true, DataDir: dir, PostgresDSN: "postgres://x"}, ErrTwoStorages},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err != tt.want {
			t.Errorf("%s: New = %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestConcurrentSameOperation is the article's property test: the same
// operation sent 5 and 50 times at once makes one record, and every
// answer is the same 201 with the same body.
func TestConcurrentSameOperation(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		for _, n := range []int{5, 50} {
			for round := range 3 {
				key, clientID := newKey(), newKey()
				body := `{"clientId":"` + clientID + `","data":{"value":120},"payloadVersion":1}`
				results, errs := make([]result, n), make([]error, n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						<-start
						results[i], errs[i] = h.do("POST", "/v1/entries", "alice.1", key, body)
					})
				}
				close(start)
				wg.Wait()
				for i := range n {
					if errs[i] != nil {
						t.Fatalf("n=%d round %d: %v", n, round, errs[i])
					}
					if results[i].status != 201 || results[i].body != results[0].body {
						t.Fatalf("n=%d round %d: answer %d is %d %s, want 201 %s", n, round, i, results[i].status, results[i].body, results[0].body)
					}
				}
				if c := h.count(t, "alice", "entries", clientID); c != 1 {
					t.Fatalf("n=%d round %d: %d records", n, round, c)
				}
			}
		}
		if es, _ := h.srv.Entities(context.Background(), "alice", "entries", ""); len(es) != 6 {
			t.Fatalf("%d records in all, want 6", len(es))
		}
	})
}

// TestAnyOrderAcrossTime: creates, updates and deletes, each sent any
// number of times in any interleaving over days: one record per create,
// and each operation's answers are all its first answer.
func TestAnyOrderAcrossTime(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := idempotencytest.NewClock(time.Date(2026, 1, 13, 0, 0, 0, 0, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW} // record-level: today's rule
		h := setup(t, cfg)
		rapid.Check(t, func(rt *rapid.T) {
			clientID := newKey()
			created := h.must(t, "POST", "/v1/entries", "alice", newKey(), `{"clientId":"`+clientID+`","data":{"v":0}}`)
			id := entityOf(t, created).ID
			type op struct{ method, path, body, key string }
			nops := rapid.IntRange(1, 5).Draw(rt, "ops")
			ops := []op{{"POST", "/v1/entries", `{"clientId":"` + clientID + `","data":{"v":0}}`, newKey()}}
			for i := 1; i < nops; i++ {
				if rapid.Bool().Draw(rt, fmt.Sprintf("delete%d", i)) {
					ops = append(ops, op{"DELETE", "/v1/entries/" + id, "", newKey()})
				} else {
					ops = append(ops, op{"PATCH", "/v1/entries/" + id, fmt.Sprintf(`{"data":{"v":%d},"payloadVersion":%d}`, i, i), newKey()})
				}
			}
			sends := rapid.SliceOfN(rapid.IntRange(0, len(ops)-1), 1, 15).Draw(rt, "sends")
			firsts := map[int]result{}
			for i, k := range sends {
				clock.Advance(time.Duration(rapid.Int64Range(0, int64(12*time.Hour)).Draw(rt, fmt.Sprintf("wait%d", i))))
				o := ops[k]
				r, err := h.do(o.method, o.path, "alice", o.key, o.body)
				if err != nil {
					rt.Fatal(err)
				}
				first, seen := firsts[k]
				if !seen {
					if r.replayed || r.status >= 300 && r.status != http.StatusGone {
						rt.Fatalf("first send of op %d: %d %s", k, r.status, r.body)
					}
					firsts[k] = r
					continue
				}
				if !r.replayed || r.status != first.status || r.body != first.body {
					rt.Fatalf("send %d of op %d: %d replayed=%v %s, want replay of %s", i, k, r.status, r.replayed, r.body, first.body)
				}
			}
			if n := h.count(t, "alice", "entries", clientID); n != 1 {
				rt.Fatalf("%d records", n)
			}
		})
	})
}

// TestHandlerFailureRollsBack: a create that fails (500) inside the
// gated transaction leaves no record and no idempotency record; the retry
// with the same key runs the domain write once.
func TestHandlerFailureRollsBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clientID := newKey()
		var calls sync.Mutex
		failNext := true
		cfg := b.config(t)
		cfg.TestHookAfterReserve = func(ctx context.Context) {
			calls.Lock()
			fail := failNext
			failNext = false
			calls.Unlock()
			if !fail {
				return
			}
			// Break the transaction so the handler's write fails.
			if tx, ok := boltstore.TxFromContext(ctx); ok {
				ck := append(scopePrefix("alice", "entries"), clientID...)
				if err := tx.Bucket(bucketClientIDs).Put(ck, []byte("no-such-entity")); err != nil {
					t.Error(err)
				}
			}
			if tx, ok := pgstore.TxFromContext(ctx); ok {
				if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
					t.Error("SELECT 1/0 did not fail")
				}
			}
		}
		h := setup(t, cfg)
		key, body := newKey(), `{"clientId":"`+clientID+`","data":{}}`
		failed := h.must(t, "POST", "/v1/entries", "alice", key, body)
		if failed.status != http.StatusInternalServerError || codeOf(t, failed) != CodeInternal {
			t.Fatalf("poisoned create: %d %s", failed.status, failed.body)
		}
		if n := h.count(t, "alice", "entries", clientID); n != 0 {
			t.Fatalf("%d records after a failed create", n)
		}
		retry := h.must(t, "POST", "/v1/entries", "alice", key, body)
		if retry.status != http.StatusCreated || retry.replayed {
			t.Fatalf("retry: %d replayed=%v %s", retry.status, retry.replayed, retry.body)
		}
		again := h.must(t, "POST", "/v1/entries", "alice", key, body)
		if !again.replayed || again.body != retry.body {
			t.Fatalf("resend: %d replayed=%v", again.status, again.replayed)
		}
		if n := h.count(t, "alice", "entries", clientID); n != 1 {
			t.Fatalf("%d records, want 1", n)
		}
	})
}

// TestResendAfterRetention: once a key's record expired and was swept, a
// resend of the create runs again but still makes no second record: 200
// with the record the first send made.
func TestResendAfterRetention(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := idempotencytest.NewClock(time.Date(2026, 1, 13, 0, 0, 0, 0, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		cfg.Retention = 48 * time.Hour
		h := setup(t, cfg)
		key, clientID := newKey(), newKey()
		body := `{"clientId":"` + clientID + `","data":{"v":1},"payloadVersion":1}`
		first := h.must(t, "POST", "/v1/entries", "alice", key, body)
		if first.status != http.StatusCreated {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		clock.Advance(47 * time.Hour)
		if n, err := h.srv.Sweep(context.Background()); err != nil || n != 0 {
			t.Fatalf("sweep inside the retention: %d %v", n, err)
		}
		if r := h.must(t, "POST", "/v1/entries", "alice", key, body); !r.replayed {
			t.Fatalf("inside the retention: %d replayed=%v", r.status, r.replayed)
		}
		clock.Advance(time.Hour)
		if n, err := h.srv.Sweep(context.Background()); err != nil || n != 1 {
			t.Fatalf("sweep after the retention: %d %v", n, err)
		}
		late := h.must(t, "POST", "/v1/entries", "alice", key, body)
		if late.status != http.StatusOK || late.replayed || entityOf(t, late).ID != entityOf(t, first).ID {
			t.Fatalf("resend after the retention: %d replayed=%v %s", late.status, late.replayed, late.body)
		}
		if n := h.count(t, "alice", "entries", clientID); n != 1 {
			t.Fatalf("%d records", n)
		}
	})
}

// The pool has DefaultPostgresMaxConns connections unless the DSN says
// otherwise.
func TestPostgresPoolSize(t *testing.T) {
	dsn := idempotencytest.PostgresDSN(t)
	for _, tc := range []struct {
		dsn  string
		want int32
	}{
		{dsn, DefaultPostgresMaxConns()},
		{withPoolMaxConns(dsn, 3), 3},
	} {
		pool, err := openPool(context.Background(), tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := pool.Config().MaxConns; got != tc.want {
			t.Errorf("%s: MaxConns %d, want %d", tc.dsn, got, tc.want)
		}
		pool.Close()
	}
}

// withPoolMaxConns adds pool_max_conns to a URL or key=value DSN.
func withPoolMaxConns(dsn string, n int) string {
	switch {
	case !strings.Contains(dsn, "://"):
		return fmt.Sprintf("%s pool_max_conns=%d", dsn, n)
	case strings.Contains(dsn, "?"):
		return fmt.Sprintf("%s&pool_max_conns=%d", dsn, n)
	default:
		return fmt.Sprintf("%s?pool_max_conns=%d", dsn, n)
	}
}

// TestCreateAfterDelete: a create (a new key) whose clientId names a
// deleted record brings the record back with the new data, under the same
// server id, so PATCH and DELETE by that id keep working; a create whose
// clientId names a live record still answers that record, 200.
func TestCreateAfterDelete(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := idempotencytest.NewClock(time.Date(2026, 1, 13, 0, 0, 0, 0, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW} // record-level: today's rule
		h := setup(t, cfg)
		const tok = "alice"

		first := h.must(t, "POST", "/v1/notes", tok, newKey(), `{"clientId":"n1","data":{"v":1},"payloadVersion":1}`)
		id := entityOf(t, first).ID
		if first.status != http.StatusCreated {
			t.Fatalf("create: %d %s", first.status, first.body)
		}
		clock.Advance(time.Second)
		if r := h.must(t, "PATCH", "/v1/notes/"+id, tok, newKey(), `{"data":{"v":5},"payloadVersion":5}`); r.status != http.StatusOK {
			t.Fatalf("update: %d %s", r.status, r.body)
		}
		if r := h.must(t, "DELETE", "/v1/notes/"+id, tok, newKey(), ""); r.status != http.StatusOK || !entityOf(t, r).Deleted {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}

		// The app creates n1 again: a new operation, a new key, and a
		// payloadVersion that starts over below the tombstone's.
		clock.Advance(time.Second)
		key, body := newKey(), `{"clientId":"n1","data":{"v":2},"payloadVersion":1}`
		again := h.must(t, "POST", "/v1/notes", tok, key, body)
		e := entityOf(t, again)
		if again.status != http.StatusCreated || e.ID != id || string(e.Data) != `{"v":2}` || e.PayloadVersion != 1 ||
			e.Deleted || e.DeletedAt != nil || !e.CreatedAt.Equal(clock.Now()) {
			t.Fatalf("create after delete: %d %s, want 201 with id %s, data {\"v\":2}, not deleted", again.status, again.body, id)
		}
		if loc := again.header.Get("Location"); loc != "/v1/notes/"+id {
			t.Fatalf("Location = %q", loc)
		}
		if r := h.must(t, "GET", "/v1/notes/"+id, tok, "", ""); r.body != again.body {
			t.Fatalf("get after re-create: %s, want %s", r.body, again.body)
		}
		if r := h.must(t, "POST", "/v1/notes", tok, key, body); !r.replayed || r.body != again.body {
			t.Fatalf("resend of the re-create: %d replayed=%v %s", r.status, r.replayed, r.body)
		}
		// Live again: another create is the duplicate guard's 200.
		if r := h.must(t, "POST", "/v1/notes", tok, newKey(), `{"clientId":"n1","data":{"v":3},"payloadVersion":1}`); r.status != http.StatusOK || r.body != again.body {
			t.Fatalf("create of a live clientId: %d %s, want 200 %s", r.status, r.body, again.body)
		}
		// The server id still works for updates and deletes.
		if r := h.must(t, "PATCH", "/v1/notes/"+id, tok, newKey(), `{"data":{"v":4},"payloadVersion":2}`); r.status != http.StatusOK || string(entityOf(t, r).Data) != `{"v":4}` {
			t.Fatalf("update after re-create: %d %s", r.status, r.body)
		}
		if r := h.must(t, "DELETE", "/v1/notes/"+id, tok, newKey(), ""); r.status != http.StatusOK || !entityOf(t, r).Deleted {
			t.Fatalf("delete after re-create: %d %s", r.status, r.body)
		}
		if n := h.count(t, "alice", "notes", "n1"); n != 1 {
			t.Fatalf("%d records, want 1", n)
		}

		// Racing re-creates with other keys and data: one wins (201),
		// the others answer its record (200).
		const n = 8
		results, errs := make([]result, n), make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = h.do("POST", "/v1/notes", tok, newKey(), fmt.Sprintf(`{"clientId":"n1","data":{"race":%d},"payloadVersion":1}`, i))
			})
		}
		close(start)
		wg.Wait()
		var winner string
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if results[i].status == http.StatusCreated {
				if winner != "" {
					t.Fatalf("two racing re-creates won: %s and %s", winner, results[i].body)
				}
				winner = results[i].body
			}
		}
		if winner == "" {
			t.Fatalf("no racing re-create won: %+v", results)
		}
		for i := range n {
			if results[i].status != http.StatusCreated && (results[i].status != http.StatusOK || results[i].body != winner) {
				t.Fatalf("racing re-create %d: %d %s, want 200 %s", i, results[i].status, results[i].body, winner)
			}
		}
		if r := h.must(t, "GET", "/v1/notes/"+id, tok, "", ""); r.body != winner {
			t.Fatalf("after the race: %s, want %s", r.body, winner)
		}
	})
}
