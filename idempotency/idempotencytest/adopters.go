package idempotencytest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
)

// This file holds the suite's tests of what a backend meets when it
// adopts the gate: result headers in a batch, the media type in the
// fingerprint, the key in the handler's context, connections and clients
// lost mid-request, expired keys re-reserved on two replicas and clocks
// that differ between replicas.

// testBatchResultHeaders: an operation's result carries its result
// headers (Location, ETag, Content-Type), the same on its first answer
// and on its replays, and none of the per-request ones.
func testBatchResultHeaders(t *testing.T, e *env) {
	ops := newOps(3)
	tags := make(map[string]string) // key → tag
	for _, op := range ops {
		tags[op.key] = op.tag
	}
	e.setRespond(func(w http.ResponseWriter, r *http.Request) bool {
		key, _ := idempotency.KeyFromContext(r.Context())
		tag := tags[key]
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/things/"+tag)
		h.Set("ETag", `"`+tag+`"`)
		h.Set("X-Request-Id", newID())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"tag":%q}`, tag)
		return true
	})
	url := e.batchURL(t, e.cfg)
	for round, want := range []bool{false, true} {
		got := e.sendBatch(t, url, "alice", ops)
		for i, r := range got {
			if r.Status != http.StatusCreated || r.Replayed != want {
				t.Fatalf("round %d, operation %d: %d replayed=%v", round, i, r.Status, r.Replayed)
			}
			if r.Headers.Get("Location") != "/things/"+ops[i].tag || r.Headers.Get("ETag") != `"`+ops[i].tag+`"` ||
				r.Headers.Get("Content-Type") != "application/json" {
				t.Fatalf("round %d, operation %d: headers %v, want its Location, ETag and Content-Type", round, i, r.Headers)
			}
			if v := r.Headers.Get("X-Request-Id"); v != "" {
				t.Fatalf("round %d, operation %d: a per-request header in the result: X-Request-Id %q", round, i, v)
			}
		}
	}
}

// testContentTypeIsPartOfTheRequest: the same bytes under another media
// type are another request (422, not the replay of a JSON answer);
// application/json with a charset, or no Content-Type, is JSON.
func testContentTypeIsPartOfTheRequest(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	first := e.sendTyped(t, e.url+"/things", "alice", key, "application/json", body)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON", ""} {
		r := e.sendTyped(t, e.url+"/things", "alice", key, ct, body)
		if r.status != http.StatusCreated || !r.replayed || r.body != first.body {
			t.Fatalf("Content-Type %q: %d replayed=%v %s, want the replay", ct, r.status, r.replayed, r.body)
		}
	}
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/merge-patch+json"} {
		r := e.sendTyped(t, e.url+"/things", "alice", key, ct, body)
		if r.status != http.StatusUnprocessableEntity || errorCode(t, r.body) != idempotency.CodeKeyReused {
			t.Fatalf("the same bytes as %q: %d replayed=%v %s, want 422 %s", ct, r.status, r.replayed, r.body, idempotency.CodeKeyReused)
		}
	}
	// A text body is its bytes: another spacing is another request.
	key = newID()
	if r := e.sendTyped(t, e.url+"/things", "alice", key, "text/plain", body); r.status != http.StatusCreated {
		t.Fatalf("text/plain: %d %s", r.status, r.body)
	}
	if r := e.sendTyped(t, e.url+"/things", "alice", key, "text/plain", " "+body); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("text/plain with a leading space: %d %s, want 422", r.status, r.body)
	}
	if n := e.effects(t, tag); n != 2 {
		t.Fatalf("effects = %d, want 2", n)
	}
}

// testKeyInContext: the handler, a batch's operation and Do's function
// find the request's key (unquoted) in their context.
func testKeyInContext(t *testing.T, e *env) {
	e.setRespond(func(w http.ResponseWriter, r *http.Request) bool {
		key, ok := idempotency.KeyFromContext(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"ok":%v}`, key, ok)
		return true
	})
	key := newID()
	want := fmt.Sprintf(`{"key":%q,"ok":true}`, key)
	if r := e.post(t, "alice", `"`+key+`"`, `{"tag":"`+newID()+`"}`); r.status != http.StatusCreated || r.body != want {
		t.Fatalf("handler: %d %s, want %s", r.status, r.body, want)
	}
	ops := newOps(2)
	for i, r := range e.sendBatch(t, e.batchURL(t, e.cfg), "alice", ops) {
		if want := fmt.Sprintf(`{"key":%q,"ok":true}`, ops[i].key); string(r.Body) != want {
			t.Fatalf("batch operation %d: %s, want %s", i, r.Body, want)
		}
	}
	g, err := idempotency.New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	key = newID()
	got, _, err := g.Do(context.Background(), "alice", key, "fp", func(ctx context.Context) ([]byte, error) {
		k, _ := idempotency.KeyFromContext(ctx)
		return []byte(k), e.h.Effect(ctx, newID())
	})
	if err != nil || string(got) != key {
		t.Fatalf("Do: %q, %v; want the key %q", got, err, key)
	}
	if _, ok := idempotency.KeyFromContext(context.Background()); ok {
		t.Fatal("KeyFromContext outside a gated request: ok")
	}
}

// testLostMidTransaction: the store's connection is cut after the
// reservation, while the handler runs. Its write fails, it answers 5xx,
// nothing is stored, and the retry with the same key runs once.
func testLostMidTransaction(t *testing.T, e *env) {
	if e.h.Kill == nil {
		t.Skip("the store has no connection to lose")
	}
	cfg := e.cfg
	var killed atomic.Bool
	cfg.TestHookAfterReserve = func(ctx context.Context) {
		if killed.CompareAndSwap(false, true) {
			if err := e.h.Kill(ctx); err != nil {
				t.Errorf("Kill: %v", err)
			}
		}
	}
	srv := httptest.NewServer(e.gate(t, cfg))
	defer srv.Close()
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	if r := e.send(t, srv.URL+"/things", "alice", key, body); r.status != http.StatusInternalServerError || r.replayed {
		t.Fatalf("a handler whose connection was cut: %d replayed=%v %s, want its 500", r.status, r.replayed, r.body)
	}
	if rec := e.record(t, "alice", key); rec != nil {
		t.Fatalf("record %+v stored", rec)
	}
	if r := e.send(t, srv.URL+"/things", "alice", key, body); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("retry: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testClientGoneBeforeCommit: the client disconnects while the handler
// runs; the handler answers after that. What it did commits with its
// answer, and the client's resend replays it.
func testClientGoneBeforeCommit(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	entered := make(chan struct{})
	var once sync.Once
	e.setHook(func(r *http.Request) int {
		once.Do(func() {
			close(entered)
			<-r.Context().Done() // the server noticed the client went
		})
		return 0
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/things", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Actor", "alice")
	req.Header.Set(idempotency.HeaderKey, key)
	gone := make(chan error, 1)
	go func() {
		resp, err := e.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	<-entered
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled request got an answer")
	}
	// The resend waits for the first in this process (InFlightWait) and
	// replays what it committed.
	r := e.post(t, "alice", key, body)
	if r.status != http.StatusCreated || !r.replayed {
		t.Fatalf("resend after the client went: %d replayed=%v %s, want the replay of the answer committed without it", r.status, r.replayed, r.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testExpiredKeyTwoReplicas: after a key's record expired, the same key
// sent to two replicas at once runs once: while one replica's run holds
// the key (replacing the expired record), the other answers 409, and
// then replays the new answer.
func testExpiredKeyTwoReplicas(t *testing.T, e *env) {
	cfg := e.cfg
	cfg.InFlightWait = 0
	one := httptest.NewServer(e.gate(t, cfg))
	defer one.Close()
	if e.h.Replica != nil {
		cfg.Store = e.h.Replica(t)
	}
	two := httptest.NewServer(e.gate(t, cfg))
	defer two.Close()

	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	old := e.send(t, one.URL+"/things", "alice", key, body)
	if old.status != http.StatusCreated {
		t.Fatalf("first: %d %s", old.status, old.body)
	}
	e.clock.Advance(idempotency.DefaultRetention)

	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	e.setHook(func(*http.Request) int {
		if runs.Add(1) == 1 { // a second run does not wait: it fails the test
			close(entered)
			<-release
		}
		return 0
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(goTB{t}, one.URL+"/things", "alice", key, body) }()
	<-entered
	dup := e.send(t, two.URL+"/things", "alice", key, body)
	close(release)
	first := <-firstDone
	if dup.status != http.StatusConflict || errorCode(t, dup.body) != idempotency.CodeInFlight {
		t.Fatalf("the other replica while the expired key is re-reserved: %d %s, want 409 %s", dup.status, dup.body, idempotency.CodeInFlight)
	}
	if first.status != http.StatusCreated || first.replayed || first.body == old.body {
		t.Fatalf("after expiry: %d replayed=%v %s", first.status, first.replayed, first.body)
	}
	if r := e.send(t, two.URL+"/things", "alice", key, body); !r.replayed || r.body != first.body {
		t.Fatalf("the other replica after the run: %d replayed=%v %s, want the new answer", r.status, r.replayed, r.body)
	}

	// And many at once, over both replicas, after the next expiry: one
	// run; every other answer is its replay or 409.
	e.clock.Advance(idempotency.DefaultRetention)
	e.setHook(func(*http.Request) int { return 0 })
	const n = 10
	resps := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i] = e.send(goTB{t}, []string{one.URL, two.URL}[i%2]+"/things", "alice", key, body)
		})
	}
	close(start)
	wg.Wait()
	ran := 0
	for i, r := range resps {
		switch {
		case r.status == http.StatusCreated && !r.replayed:
			ran++
		case r.status == http.StatusCreated || r.status == http.StatusConflict:
		default:
			t.Fatalf("send %d: %d %s", i, r.status, r.body)
		}
	}
	if ran != 1 {
		t.Fatalf("%d runs after the second expiry, want 1", ran)
	}
	if got := e.effects(t, tag); got != 3 {
		t.Fatalf("effects = %d, want 3 (one per retention period)", got)
	}
}

// MaxClockSkew is the difference between replicas' clocks the suite
// tests: docs/server.md states the gate's tolerance in its terms.
const MaxClockSkew = 5 * time.Minute

// testClockSkew: replicas whose clocks differ by up to MaxClockSkew
// (one behind, one ahead) agree on every key: a record written by the
// replica behind replays on the one ahead for the whole retention less
// the skew, and a duplicate in flight answers 409 whatever the clocks.
func testClockSkew(t *testing.T, e *env) {
	half := MaxClockSkew / 2
	cfg := e.cfg
	cfg.InFlightWait = 0
	cfg.Now = func() time.Time { return e.clock.Now().Add(-half) }
	behind := httptest.NewServer(e.gate(t, cfg))
	defer behind.Close()
	if e.h.Replica != nil {
		cfg.Store = e.h.Replica(t)
	}
	cfg.Now = func() time.Time { return e.clock.Now().Add(half) }
	ahead := httptest.NewServer(e.gate(t, cfg))
	defer ahead.Close()

	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	t0 := e.clock.Now()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.setHook(func(*http.Request) int {
		once.Do(func() {
			close(entered)
			<-release
		})
		return 0
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(goTB{t}, behind.URL+"/things", "alice", key, body) }()
	<-entered
	dup := e.send(t, ahead.URL+"/things", "alice", key, body)
	close(release)
	first := <-firstDone
	if dup.status != http.StatusConflict || errorCode(t, dup.body) != idempotency.CodeInFlight {
		t.Fatalf("in flight, clock ahead: %d %s, want 409", dup.status, dup.body)
	}
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	for _, at := range []time.Duration{0, time.Hour, idempotency.DefaultRetention - MaxClockSkew - time.Nanosecond} {
		e.clock.Advance(t0.Add(at).Sub(e.clock.Now()))
		for name, url := range map[string]string{"behind": behind.URL, "ahead": ahead.URL} {
			if r := e.send(t, url+"/things", "alice", key, body); !r.replayed || r.body != first.body {
				t.Fatalf("%v after the first, replica %s: %d replayed=%v %s, want the replay", at, name, r.status, r.replayed, r.body)
			}
		}
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}
