package idempotencytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
)

// This file holds the suite's tests of what the gate stores and how it
// waits: which answers are final, what is part of the request, what a
// duplicate in flight gets, the processing lease, the caps, Do and the
// sweep.

// testReleasedStatuses: answers that say the request was not authorised
// or not attempted are not stored, nor the writes made before them; the
// same key runs again (the daemon resends a key after refreshing its
// token, and must not get the old 401 back).
func testReleasedStatuses(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	for _, status := range []int{401, 403, 408, 425, 429, 500, 502, 503} {
		e.setHook(func(*http.Request) int { return status })
		if r := e.post(t, "alice", key, body); r.status != status || r.replayed {
			t.Fatalf("handler answering %d: got %d replayed=%v %s", status, r.status, r.replayed, r.body)
		}
		if n := e.effects(t, tag); n != 0 {
			t.Fatalf("after a %d: effects = %d, want 0 (rolled back)", status, n)
		}
		if rec := e.record(t, "alice", key); rec != nil {
			t.Fatalf("after a %d: record %+v stored", status, rec)
		}
	}
	e.setHook(func(*http.Request) int { return 0 })
	if r := e.post(t, "alice", key, body); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("after the refusals: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testBusinessRefusalStored: a handler's business refusal (409
// "username_taken", 422) is final: stored and replayed without
// Retry-After, and what the handler wrote before answering commits with
// it (the rule: a stored answer and its writes are one unit).
func testBusinessRefusalStored(t *testing.T, e *env) {
	for _, status := range []int{http.StatusConflict, http.StatusUnprocessableEntity, http.StatusNotFound} {
		key, tag := newID(), newID()
		body := `{"tag":"` + tag + `"}`
		e.setHook(func(*http.Request) int { return status })
		first := e.post(t, "alice", key, body)
		e.setHook(func(*http.Request) int { return 0 })
		again := e.post(t, "alice", key, body)
		if first.status != status || again.status != status || !again.replayed || again.body != first.body {
			t.Fatalf("business %d: first %d %s, again %d replayed=%v %s", status, first.status, first.body, again.status, again.replayed, again.body)
		}
		if again.header.Get("Retry-After") != "" {
			t.Fatalf("business %d replayed with Retry-After %q", status, again.header.Get("Retry-After"))
		}
		if n := e.effects(t, tag); n != 1 {
			t.Fatalf("business %d: effects = %d, want 1 (committed with the stored answer)", status, n)
		}
		if rec := e.record(t, "alice", key); rec == nil || rec.Status != idempotency.StatusCompleted || rec.ResponseStatus != status {
			t.Fatalf("business %d: record %+v", status, rec)
		}
	}
}

// testQueryInFingerprint: method, path and query are the request; the
// order of query parameters is not.
func testQueryInFingerprint(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	first := e.send(t, e.url+"/things?dryRun=true&b=2", "alice", key, body)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	same := e.send(t, e.url+"/things?b=2&dryRun=true", "alice", key, body)
	if !same.replayed || same.body != first.body {
		t.Fatalf("parameters reordered: %d replayed=%v %s", same.status, same.replayed, same.body)
	}
	other := e.send(t, e.url+"/things?dryRun=false&b=2", "alice", key, body)
	if other.status != http.StatusUnprocessableEntity || errorCode(t, other.body) != idempotency.CodeKeyReused {
		t.Fatalf("other query, same key: %d %s, want 422", other.status, other.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testAmbiguousJSON: JSON the fingerprint could not tell apart from
// another request is refused before anything runs.
func testAmbiguousJSON(t *testing.T, e *env) {
	tag := newID()
	for name, body := range map[string]string{
		"invalid UTF-8":        `{"tag":"` + tag + "\xff\xfe" + `"}`,
		"lone high surrogate":  `{"tag":"` + tag + `","n":"\ud800"}`,
		"lone low surrogate":   `{"tag":"` + tag + `","n":"\udfff"}`,
		"repeated member name": `{"tag":"` + tag + `","tag":"` + newID() + `"}`,
	} {
		key := newID()
		r := e.post(t, "alice", key, body)
		if r.status != http.StatusBadRequest || errorCode(t, r.body) != idempotency.CodeBadRequest {
			t.Errorf("%s: %d %s, want 400 bad_request", name, r.status, r.body)
		}
		if rec := e.record(t, "alice", key); rec != nil {
			t.Errorf("%s: record %+v stored", name, rec)
		}
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("effects = %d, want 0", n)
	}
	// Valid surrogate pairs and non-JSON bodies are not refused here.
	if r := e.post(t, "alice", newID(), `{"tag":"`+tag+`","n":"\ud83d\ude00"}`); r.status != http.StatusCreated {
		t.Fatalf("surrogate pair: %d %s", r.status, r.body)
	}
}

// testOnlyConfiguredExcluded: fields are left out of the fingerprint only
// when the backend names them; business fields called attempt or
// requestId count.
func testOnlyConfiguredExcluded(t *testing.T, e *env) {
	key, tag := newID(), newID()
	first := e.post(t, "alice", key, `{"tag":"`+tag+`","attempt":1,"requestId":"a","sentAt":"09:00"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if r := e.post(t, "alice", key, `{"tag":"`+tag+`","attempt":1,"requestId":"a","sentAt":"09:05"}`); !r.replayed {
		t.Fatalf("configured field changed: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	for _, body := range []string{
		`{"tag":"` + tag + `","attempt":2,"requestId":"a","sentAt":"09:00"}`,
		`{"tag":"` + tag + `","attempt":1,"requestId":"b","sentAt":"09:00"}`,
	} {
		if r := e.post(t, "alice", key, body); r.status != http.StatusUnprocessableEntity {
			t.Fatalf("business field changed (%s): %d %s, want 422", body, r.status, r.body)
		}
	}
}

// testInFlightAtOnce: a duplicate sent to another replica while the first
// request runs answers 409 with Retry-After at once: it does not wait for
// the first (which here waits for the duplicate's answer, so a store
// that made the duplicate wait would stall both).
func testInFlightAtOnce(t *testing.T, e *env) {
	store := e.h.Store
	if e.h.Replica != nil {
		store = e.h.Replica(t)
	}
	cfg := e.cfg
	cfg.Store = store
	cfg.InFlightWait = 0 // the default
	replica := httptest.NewServer(e.gate(t, cfg))
	defer replica.Close()

	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	entered, dupDone := make(chan struct{}), make(chan response, 1)
	// The bound only turns a stall into a failure; an answer at once
	// takes milliseconds.
	const stall = 20 * time.Second
	stalled := make(chan bool, 1)
	e.setHook(func(*http.Request) int {
		close(entered)
		select {
		case r := <-dupDone:
			dupDone <- r
			stalled <- false
		case <-time.After(stall):
			stalled <- true
		}
		return 0
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.post(goTB{t}, "alice", key, body) }()
	<-entered
	go func() { dupDone <- e.send(goTB{t}, replica.URL+"/things", "alice", key, body) }()
	first := <-firstDone
	if <-stalled {
		t.Fatalf("the duplicate on the other replica waited for the first request (over %v)", stall)
	}
	dup := <-dupDone
	if dup.status != http.StatusConflict || errorCode(t, dup.body) != idempotency.CodeInFlight || dup.header.Get("Retry-After") == "" {
		t.Fatalf("duplicate in flight: %d Retry-After=%q %s", dup.status, dup.header.Get("Retry-After"), dup.body)
	}
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	e.setHook(func(*http.Request) int { return 0 })
	if r := e.send(t, replica.URL+"/things", "alice", key, body); !r.replayed || r.body != first.body {
		t.Fatalf("after completion, on the replica: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testProcessingLease: a handler that commits the gate's transaction
// itself gets a 500 (no panic, nothing stored as an answer); the
// processing record it committed holds the key for the processing lease
// only.
func testProcessingLease(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setHook(func(r *http.Request) int {
		if err := e.h.EndTx(r.Context()); err != nil {
			t.Errorf("EndTx: %v", err)
		}
		return 0
	})
	if r := e.post(t, "alice", key, body); r.status != http.StatusInternalServerError || errorCode(t, r.body) != idempotency.CodeInternal {
		t.Fatalf("handler that committed the gate's transaction: %d %s, want 500", r.status, r.body)
	}
	e.setHook(func(*http.Request) int { return 0 })
	rec := e.record(t, "alice", key)
	if rec == nil || rec.Status != idempotency.StatusProcessing || !rec.ExpiresAt.Equal(e.clock.Now().Add(idempotency.DefaultProcessingLease)) {
		t.Fatalf("record left = %+v, want processing until the lease ends", rec)
	}
	if r := e.post(t, "alice", key, body); r.status != http.StatusConflict || errorCode(t, r.body) != idempotency.CodeInFlight {
		t.Fatalf("within the lease: %d %s, want 409", r.status, r.body)
	}
	e.clock.Advance(idempotency.DefaultProcessingLease)
	r := e.post(t, "alice", key, body)
	if r.status != http.StatusCreated || r.replayed {
		t.Fatalf("after the lease: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if again := e.post(t, "alice", key, body); !again.replayed || again.body != r.body {
		t.Fatalf("replay after the lease: %d replayed=%v", again.status, again.replayed)
	}
	// The handler broke the rules, so its first write committed too.
	if n := e.effects(t, tag); n != 2 {
		t.Fatalf("effects = %d, want 2", n)
	}
}

// testResponseCap: an answer over MaxResponseBytes is not stored, and
// neither is the effect that went with it; the client is told why.
func testResponseCap(t *testing.T, e *env) {
	cfg := e.cfg
	cfg.MaxResponseBytes = 1 << 10
	srv := httptest.NewServer(e.gate(t, cfg))
	defer srv.Close()
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setRespond(func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"pad":%q}`, strings.Repeat("x", 4<<10))
		return true
	})
	r := e.send(t, srv.URL+"/things", "alice", key, body)
	if r.status != http.StatusInternalServerError || errorCode(t, r.body) != idempotency.CodeResponseTooLarge {
		t.Fatalf("answer over the cap: %d %s, want 500 response_too_large", r.status, r.body)
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("effects = %d, want 0 (rolled back with its answer)", n)
	}
	if rec := e.record(t, "alice", key); rec != nil {
		t.Fatalf("record stored: %+v", rec)
	}
	e.setRespond(func(http.ResponseWriter, *http.Request) bool { return false })
	if r := e.send(t, srv.URL+"/things", "alice", key, body); r.status != http.StatusCreated {
		t.Fatalf("a small answer afterwards: %d %s", r.status, r.body)
	}
}

// testReplayedHeaders: the replay carries the headers that describe the
// result, and not per-request ones.
func testReplayedHeaders(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setRespond(func(w http.ResponseWriter, r *http.Request) bool {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/things/"+tag)
		h.Set("ETag", `"v1"`)
		h.Set("X-Request-Id", newID())
		h.Set("Set-Cookie", "session=1")
		h.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		h.Set(idempotency.HeaderReplayed, "true")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"tag":%q}`, tag)
		return true
	})
	first := e.post(t, "alice", key, body)
	again := e.post(t, "alice", key, body)
	if first.status != http.StatusCreated || first.replayed || first.header.Get("X-Request-Id") == "" {
		t.Fatalf("first: %d replayed=%v header %v", first.status, first.replayed, first.header)
	}
	if !again.replayed || again.body != first.body {
		t.Fatalf("again: %d replayed=%v %s", again.status, again.replayed, again.body)
	}
	for _, h := range []string{"Content-Type", "Location", "ETag"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s = %q, want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	for _, h := range []string{"X-Request-Id", "Set-Cookie", "Traceparent"} {
		if v := again.header.Get(h); v != "" {
			t.Errorf("replayed %s: %q", h, v)
		}
	}
	rec := e.record(t, "alice", key)
	if rec == nil || len(rec.ResponseHeader) != 3 {
		t.Fatalf("stored headers = %v, want Content-Type, Location, ETag", rec.ResponseHeader)
	}
}

// testDo: the function form runs once per key, replays its result,
// refuses a reused key, stores nothing for a failing function, and
// answers ErrInFlight while another run holds the key.
func testDo(t *testing.T, e *env) {
	ctx := context.Background()
	cfg := e.cfg
	cfg.InFlightWait = 0
	g, err := idempotency.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key, tag := newID(), newID()
	run := func(ctx context.Context) ([]byte, error) {
		if err := e.h.Effect(ctx, tag); err != nil {
			return nil, err
		}
		return []byte("result " + newID()), nil
	}
	fp := idempotency.Fingerprint("", "consumer", []byte(`{"tag":"`+tag+`"}`), nil)

	boom := errors.New("boom")
	if _, _, err := g.Do(ctx, "alice", key, fp, func(ctx context.Context) ([]byte, error) {
		if err := e.h.Effect(ctx, tag); err != nil {
			return nil, err
		}
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing fn: %v", err)
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("after a failing fn: effects = %d, want 0", n)
	}
	first, replayed, err := g.Do(ctx, "alice", key, fp, run)
	if err != nil || replayed || !strings.HasPrefix(string(first), "result ") {
		t.Fatalf("first Do: %q %v %v", first, replayed, err)
	}
	again, replayed, err := g.Do(ctx, "alice", key, fp, run)
	if err != nil || !replayed || string(again) != string(first) {
		t.Fatalf("second Do: %q %v %v, want replay of %q", again, replayed, err, first)
	}
	if _, _, err := g.Do(ctx, "alice", key, "other", run); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("other fingerprint: %v, want ErrKeyReused", err)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	// In flight: a second Do with the key while the first runs.
	key2 := newID()
	_, _, err = g.Do(ctx, "alice", key2, fp, func(ctx context.Context) ([]byte, error) {
		_, _, err := g.Do(context.Background(), "alice", key2, fp, run)
		if !errors.Is(err, idempotency.ErrInFlight) {
			t.Errorf("Do while the key runs: %v, want ErrInFlight", err)
		}
		return []byte("ok"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", strings.Repeat("k", idempotency.MaxKeyLength+1), "a\nb"} {
		if _, _, err := g.Do(ctx, "alice", bad, fp, run); err == nil {
			t.Errorf("Do with key %q: no error", bad)
		}
	}
}

// testSweepBatches: a sweep deletes every expired record however many
// batches it takes, and nothing that has not expired.
func testSweepBatches(t *testing.T, e *env) {
	ctx := context.Background()
	const n = 2100 // over two of any store's batches of 1,000
	base := e.clock.Now()
	for i := range n {
		tx, err := e.h.Store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec := &idempotency.Record{Actor: "sweep", Key: fmt.Sprintf("k%05d", i), Operation: "test", Fingerprint: "f",
			Status: idempotency.StatusProcessing, CreatedAt: base, ExpiresAt: base.Add(time.Duration(i%7) * time.Millisecond)}
		if old, err := tx.Reserve(ctx, rec, base); err != nil || old != nil {
			t.Fatalf("Reserve %d: %v %v", i, old, err)
		}
		done := *rec
		done.Status, done.ResponseStatus, done.CompletedAt = idempotency.StatusCompleted, 200, base
		done.ExpiresAt = base.Add(time.Hour + time.Duration(i%7)*time.Millisecond)
		if i%10 == 0 {
			done.ExpiresAt = base.Add(48 * time.Hour) // not yet expired at the sweep
		}
		if err := tx.Complete(ctx, &done); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.h.Store.Sweep(ctx, base.Add(2*time.Hour))
	if err != nil || got != n-n/10 {
		t.Fatalf("Sweep = %d, %v; want %d", got, err, n-n/10)
	}
	for i := range n {
		rec := e.record(t, "sweep", fmt.Sprintf("k%05d", i))
		if (i%10 == 0) != (rec != nil) {
			t.Fatalf("record %d after the sweep: %+v", i, rec)
		}
	}
}
