// Package idempotencytest is the conformance suite for idempotency.Store
// implementations, run against boltstore and pgstore, and usable for any
// other store: build a Harness per test and call Run.
//
// The suite drives a real idempotency.Gate over HTTP on loopback in front
// of a test handler whose one domain effect (Harness.Effect) is written in
// the gated request's transaction, and checks the protocol: one effect
// per key however often and however concurrently it is sent, identical
// answers, 422 on a reused key, 400 on a missing key, nothing stored for
// a failing handler, a refusal stored after a failed statement, expiry
// and sweeping, and batches whose operations commit together
// (idempotency.BatchHandler with the Store, a GroupStore or not).
//
// It imports nothing but the standard library, pgx (PostgresDSN) and
// this module's packages, so a backend that runs it in its tests adds no
// test-only module to its go.mod.
package idempotencytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
)

// Harness connects the suite to one fresh, empty store.
type Harness struct {
	Store idempotency.Store
	// Effect performs one domain write tagged tag inside the gated
	// request's transaction, which it finds in ctx.
	Effect func(ctx context.Context, tag string) error
	// Effects counts the committed domain writes tagged tag.
	Effects func(ctx context.Context, tag string) (int, error)
	// Record returns the committed record for (actor, key), or nil.
	Record func(ctx context.Context, actor, key string) (*idempotency.Record, error)
	// EndTx commits the gated request's transaction behind the gate's
	// back, as a handler that breaks the rules would (with the store's
	// own transaction type).
	EndTx func(ctx context.Context) error
	// Replica, if set, returns another Store on the same data, as
	// another server process would have it (its own connections, no
	// state shared in memory). Stores that only one process can open
	// (bbolt) leave it nil: their replicas are gates on the same Store.
	Replica func(t *testing.T) idempotency.Store
	// Kill, if set, cuts the connection of the gated request's
	// transaction in ctx from outside (pg_terminate_backend from another
	// connection), as a lost network or a database restart would, and
	// returns once it is cut. Stores without a connection (bbolt) leave
	// it nil.
	Kill func(ctx context.Context) error
	// FailStatement, if set, runs a statement that fails in the gated
	// request's transaction in ctx and returns its error, as a handler's
	// INSERT meeting a unique violation would: on PostgreSQL the
	// transaction is then aborted (25P02). Stores whose transactions a
	// failed write does not abort (bbolt) leave it nil.
	FailStatement func(ctx context.Context) error
}

// Run runs the suite. newHarness is called once per subtest and must
// return a harness on a store no other subtest uses.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"FirstRunThenReplay", testReplay},
		{"KeyReusedWithOtherBody", testKeyReused},
		{"MissingOrInvalidKey", testMissingKey},
		{"FingerprintIgnoresFormattingAndMetadata", testFingerprintCanonical},
		{"ActorScopesKeys", testActorScope},
		{"FailingHandlerStoresNothing", testHandlerFails},
		{"PanickingHandlerStoresNothing", testHandlerPanics},
		{"ClientErrorIsStored", testClientErrorIsStored},
		{"ConcurrentDuplicates5", func(t *testing.T, e *env) { testConcurrent(t, e, 5) }},
		{"ConcurrentDuplicates50", func(t *testing.T, e *env) { testConcurrent(t, e, 50) }},
		{"InFlightAnswers409", testInFlight},
		{"ReplicaDuplicateReplays", testReplicaDuplicate},
		{"AnyOrderAcrossTime", testAnyOrder},
		{"ExpiryAndSweep", testExpiry},
		{"TxContract", testTxContract},
		{"NotAuthorisedOrNotAttemptedIsReleased", testReleasedStatuses},
		{"BusinessRefusalIsStoredWithItsWrites", testBusinessRefusalStored},
		{"QueryIsPartOfTheRequest", testQueryInFingerprint},
		{"AmbiguousJSONIsRefused", testAmbiguousJSON},
		{"OnlyConfiguredFieldsAreExcluded", testOnlyConfiguredExcluded},
		{"InFlightAnswersAtOnceOnAnotherReplica", testInFlightAtOnce},
		{"ProcessingLeaseFreesAKeyCommittedWithoutAnswer", testProcessingLease},
		{"AnswerOverTheCapIsNotStored", testResponseCap},
		{"OnlyResultHeadersAreReplayed", testReplayedHeaders},
		{"DoRunsOnce", testDo},
		{"SweepWalksManyBatches", testSweepBatches},
		{"CompletedKeyReplaysToConcurrentResends", testCompletedConcurrentResends},
		{"DeepJSONIsRefused", testDeepJSON},
		{"LostConnectionAtCommitAsksForARetry", testLostAtCommit},
		{"FailedStatementThenRefusalIsStored", testFailedStatementThenRefusal},
		{"FailedStatementThenSuccessIsNothingDone", testFailedStatementThenSuccess},
		{"BatchCommitsTogether", testBatchCommitsTogether},
		{"BatchItemRolledBackAlone", testBatchItemRolledBack},
		{"BatchSameKeyTwice", testBatchSameKeyTwice},
		{"BatchConcurrentWithSingles", testBatchConcurrent},
		{"BatchFailedStatementThenRefusal", testBatchFailedStatement},
		{"BatchLostConnection", testBatchLostConnection},
		{"BatchResultsCarryResultHeaders", testBatchResultHeaders},
		{"ContentTypeIsPartOfTheRequest", testContentTypeIsPartOfTheRequest},
		{"KeyInContext", testKeyInContext},
		{"LostConnectionMidTransaction", testLostMidTransaction},
		{"ClientGoneBeforeCommit", testClientGoneBeforeCommit},
		{"ExpiredKeyOnTwoReplicas", testExpiredKeyTwoReplicas},
		{"ClockSkewWithinTolerance", testClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, setup(t, newHarness(t)))
		})
	}
}

// env is one subtest's gate, test handler and HTTP server.
type env struct {
	h      Harness
	clock  *Clock
	url    string
	client *http.Client
	// hook, when set, runs in the handler after the effect and may
	// replace the answer: a status > 0 is written instead of 201.
	hook atomic.Pointer[func(r *http.Request) int]
	// respond, when set, runs after the effect and the hook and may
	// write the whole answer itself (it returns true if it did).
	respond atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
	cfg     idempotency.Config
	seq     atomic.Int64
}

func setup(t *testing.T, h Harness) *env {
	t.Helper()
	e := &env{h: h, clock: NewClock(time.Date(2026, 1, 13, 0, 10, 0, 0, time.UTC))}
	e.cfg = idempotency.Config{
		Store:          h.Store,
		Actor:          func(r *http.Request) (string, error) { return r.Header.Get("X-Actor"), nil },
		Now:            e.clock.Now,
		InFlightWait:   time.Minute, // duplicates in this process wait for the first and replay
		ExcludedFields: []string{"sentAt", "traceId"},
	}
	srv := httptest.NewServer(e.gate(t, e.cfg))
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	e.client = &http.Client{Transport: tr}
	e.url = srv.URL
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return e
}

// gate returns the test handler behind a gate made from cfg.
func (e *env) gate(t *testing.T, cfg idempotency.Config) http.Handler {
	t.Helper()
	g, err := idempotency.New(cfg)
	if err != nil {
		t.Fatalf("idempotency.New: %v", err)
	}
	return g.Wrap(http.HandlerFunc(e.handle))
}

// handle is the test domain: it writes one effect tagged with the body's
// "tag" and answers 201 with a nonce, so two executions never answer the
// same body.
func (e *env) handle(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Tag string `json:"tag"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Tag == "" {
		idempotency.Error(w, r, http.StatusBadRequest, "validation", "body needs a tag")
		return
	}
	if err := e.h.Effect(r.Context(), in.Tag); err != nil {
		idempotency.Error(w, r, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	if hp := e.hook.Load(); hp != nil {
		if status := (*hp)(r); status > 0 {
			idempotency.Error(w, r, status, "hooked", "answer chosen by the test hook")
			return
		}
	}
	if rp := e.respond.Load(); rp != nil && (*rp)(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/things/"+in.Tag)
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"tag":%q,"nonce":%q,"run":%d}`, in.Tag, newID(), e.seq.Add(1))
}

func (e *env) setHook(fn func(r *http.Request) int) { e.hook.Store(&fn) }

func (e *env) setRespond(fn func(w http.ResponseWriter, r *http.Request) bool) { e.respond.Store(&fn) }

type response struct {
	status   int
	body     string
	header   http.Header
	replayed bool
}

func (e *env) send(t tb, url, actor, key, body string) response {
	t.Helper()
	return e.sendTyped(t, url, actor, key, "application/json", body)
}

// sendTyped is send with another Content-Type ("" sends none).
func (e *env) sendTyped(t tb, url, actor, key, contentType, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("X-Actor", actor)
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, string(b), resp.Header, resp.Header.Get(idempotency.HeaderReplayed) == "true"}
}

func (e *env) post(t tb, actor, key, body string) response {
	t.Helper()
	return e.send(t, e.url+"/things", actor, key, body)
}

func (e *env) effects(t tb, tag string) int {
	t.Helper()
	n, err := e.h.Effects(context.Background(), tag)
	if err != nil {
		t.Fatalf("Effects(%q): %v", tag, err)
	}
	return n
}

func (e *env) record(t tb, actor, key string) *idempotency.Record {
	t.Helper()
	rec, err := e.h.Record(context.Background(), actor, key)
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	return rec
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func errorCode(t tb, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("error body %q is not {\"error\":{\"code\",\"message\"}}", body)
	}
	return e.Error.Code
}

func testReplay(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	first := e.post(t, "alice", key, body)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first send: %d replayed=%v %s", first.status, first.replayed, first.body)
	}
	for i := range 3 {
		again := e.post(t, "alice", key, body)
		if again.status != first.status || again.body != first.body || !again.replayed {
			t.Fatalf("send %d: %d %q replayed=%v, want replay of %d %q", i+2, again.status, again.body, again.replayed, first.status, first.body)
		}
		if got, want := again.header.Get("Location"), first.header.Get("Location"); got != want {
			t.Fatalf("replayed Location %q, want %q", got, want)
		}
		if got := again.header.Get("Content-Type"); got != "application/json" {
			t.Fatalf("replayed Content-Type %q", got)
		}
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	rec := e.record(t, "alice", key)
	if rec == nil || rec.Status != idempotency.StatusCompleted || rec.ResponseStatus != http.StatusCreated || string(rec.ResponseBody) != first.body {
		t.Fatalf("stored record = %+v", rec)
	}
	if want := e.clock.Now().Add(idempotency.DefaultRetention); !rec.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", rec.ExpiresAt, want)
	}
}

func testKeyReused(t *testing.T, e *env) {
	key, tag, other := newID(), newID(), newID()
	if r := e.post(t, "alice", key, `{"tag":"`+tag+`"}`); r.status != http.StatusCreated {
		t.Fatalf("first send: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{"tag":"` + other + `"}`, `{"tag":"` + tag + `","extra":1}`} {
		r := e.post(t, "alice", key, body)
		if r.status != http.StatusUnprocessableEntity || errorCode(t, r.body) != idempotency.CodeKeyReused {
			t.Fatalf("reused key with %s: %d %s", body, r.status, r.body)
		}
	}
	// The same body on another route is another request too.
	r := e.send(t, e.url+"/other", "alice", key, `{"tag":"`+tag+`"}`)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("reused key on another route: %d %s", r.status, r.body)
	}
	if n, m := e.effects(t, tag), e.effects(t, other); n != 1 || m != 0 {
		t.Fatalf("effects = %d, %d; want 1, 0", n, m)
	}
}

func testMissingKey(t *testing.T, e *env) {
	tag := newID()
	long := string(bytes.Repeat([]byte("k"), idempotency.MaxKeyLength+1))
	tests := []struct {
		name, key, code string
	}{
		{"missing", "", idempotency.CodeKeyMissing},
		{"too long", long, idempotency.CodeKeyInvalid},
		{"empty quoted", `""`, idempotency.CodeKeyInvalid},
	}
	for _, tt := range tests {
		r := e.post(t, "alice", tt.key, `{"tag":"`+tag+`"}`)
		if r.status != http.StatusBadRequest || errorCode(t, r.body) != tt.code {
			t.Errorf("%s key: %d %s, want 400 %s", tt.name, r.status, r.body, tt.code)
		}
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("effects = %d, want 0", n)
	}
	// A GET passes through ungated (the handler rejects its empty body).
	req, _ := http.NewRequest(http.MethodGet, e.url+"/things", nil)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}

func testFingerprintCanonical(t *testing.T, e *env) {
	key, tag := newID(), newID()
	first := e.post(t, "alice", key, `{"tag":"`+tag+`","n":1,"sentAt":"09:10:03"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// Other key order, whitespace, escapes, other attempt metadata, and
	// the IETF draft's quoted form of the key: the same request.
	again := e.post(t, "alice", `"`+key+`"`, " {\n \"n\": 1, \"traceId\": \"t2\", \"tag\": \"\\u0"+fmt.Sprintf("%03x", tag[0])+tag[1:]+"\", \"sentAt\": \"09:11:10\"}")
	if again.status != http.StatusCreated || !again.replayed || again.body != first.body {
		t.Fatalf("equivalent request: %d replayed=%v %s", again.status, again.replayed, again.body)
	}
}

func testActorScope(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	a, b := e.post(t, "alice", key, body), e.post(t, "bob", key, body)
	if a.status != http.StatusCreated || b.status != http.StatusCreated || b.replayed || a.body == b.body {
		t.Fatalf("alice %d %s, bob %d replayed=%v %s", a.status, a.body, b.status, b.replayed, b.body)
	}
	if n := e.effects(t, tag); n != 2 {
		t.Fatalf("effects = %d, want 2 (one per actor)", n)
	}
}

func testHandlerFails(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		e.setHook(func(*http.Request) int { return status })
		if r := e.post(t, "alice", key, body); r.status != status || r.replayed {
			t.Fatalf("failing handler: %d %s, want %d", r.status, r.body, status)
		}
		if n := e.effects(t, tag); n != 0 {
			t.Fatalf("after a %d: effects = %d, want 0 (rolled back)", status, n)
		}
		if rec := e.record(t, "alice", key); rec != nil {
			t.Fatalf("after a %d: record %+v stored", status, rec)
		}
	}
	e.setHook(func(*http.Request) int { return 0 })
	first := e.post(t, "alice", key, body)
	second := e.post(t, "alice", key, body)
	if first.status != http.StatusCreated || first.replayed || !second.replayed || second.body != first.body {
		t.Fatalf("retries: %d %v %s / %d %v %s", first.status, first.replayed, first.body, second.status, second.replayed, second.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

func testHandlerPanics(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setHook(func(*http.Request) int { panic(http.ErrAbortHandler) })
	req, _ := http.NewRequest(http.MethodPost, e.url+"/things", bytes.NewBufferString(body))
	req.Header.Set(idempotency.HeaderKey, key)
	req.Header.Set("X-Actor", "alice")
	if resp, err := e.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("panicking handler answered %d", resp.StatusCode)
	}
	e.setHook(func(*http.Request) int { return 0 })
	// The transaction was rolled back: nothing stored, and the store is
	// usable (for bbolt: the writer lock was released).
	if r := e.post(t, "alice", key, body); r.status != http.StatusCreated || r.replayed {
		t.Fatalf("after panic: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

func testClientErrorIsStored(t *testing.T, e *env) {
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setHook(func(*http.Request) int { return http.StatusBadRequest })
	first := e.post(t, "alice", key, body)
	e.setHook(func(*http.Request) int { return 0 })
	again := e.post(t, "alice", key, body)
	if first.status != http.StatusBadRequest || again.status != http.StatusBadRequest || !again.replayed || again.body != first.body {
		t.Fatalf("4xx answer: first %d %s, again %d replayed=%v %s", first.status, first.body, again.status, again.replayed, again.body)
	}
}

// testConcurrent is the article's property test: the same operation sent
// n times at once has one effect and every answer is the same.
func testConcurrent(t *testing.T, e *env, n int) {
	for round := range 3 {
		key, tag := newID(), newID()
		body := `{"tag":"` + tag + `"}`
		resps := make([]response, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resps[i] = e.post(goTB{t}, "alice", key, body)
			})
		}
		close(start)
		wg.Wait()
		executed := 0
		for i, r := range resps {
			if r.status != http.StatusCreated || r.body != resps[0].body {
				t.Fatalf("round %d: response %d is %d %s, want 201 %s", round, i, r.status, r.body, resps[0].body)
			}
			if !r.replayed {
				executed++
			}
		}
		if executed != 1 {
			t.Fatalf("round %d: %d responses not replayed, want 1", round, executed)
		}
		if got := e.effects(t, tag); got != 1 {
			t.Fatalf("round %d: effects = %d, want 1", round, got)
		}
	}
}

func testInFlight(t *testing.T, e *env) {
	// A gate that does not wait for a duplicate in flight.
	cfg := e.cfg
	cfg.InFlightWait = -1
	cfg.RetryAfter = 2500 * time.Millisecond
	// The hint is jittered up to twice RetryAfter: the largest draw.
	cfg.Rand = func(n int64) int64 { return n - 1 }
	srv := httptest.NewServer(e.gate(t, cfg))
	defer srv.Close()

	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	entered, release := make(chan struct{}), make(chan struct{})
	e.setHook(func(*http.Request) int {
		close(entered)
		<-release
		return 0
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(goTB{t}, srv.URL+"/things", "alice", key, body) }()
	<-entered
	dup := e.send(t, srv.URL+"/things", "alice", key, body)
	close(release)
	first := <-firstDone
	if dup.status != http.StatusConflict || errorCode(t, dup.body) != idempotency.CodeInFlight || dup.header.Get("Retry-After") != "5" {
		t.Fatalf("duplicate in flight: %d Retry-After=%q %s", dup.status, dup.header.Get("Retry-After"), dup.body)
	}
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if r := e.send(t, srv.URL+"/things", "alice", key, body); !r.replayed || r.body != first.body {
		t.Fatalf("after completion: %d replayed=%v", r.status, r.replayed)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testReplicaDuplicate sends a duplicate through a second gate on the
// same store (another replica: it shares no in-process state) while the
// first request is in its handler. The store must hold the duplicate
// until the first commits and then replay it, or answer 409.
func testReplicaDuplicate(t *testing.T, e *env) {
	replica := httptest.NewServer(e.gate(t, e.cfg))
	defer replica.Close()

	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.setHook(func(*http.Request) int {
		once.Do(func() { close(entered) })
		<-release
		return 0
	})
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.post(goTB{t}, "alice", key, body) }()
	<-entered
	dupDone := make(chan response, 1)
	go func() { dupDone <- e.send(goTB{t}, replica.URL+"/things", "alice", key, body) }()
	close(release)
	first, dup := <-firstDone, <-dupDone
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first: %d replayed=%v %s", first.status, first.replayed, first.body)
	}
	switch {
	case dup.status == http.StatusConflict && errorCode(t, dup.body) == idempotency.CodeInFlight:
	case dup.status == http.StatusCreated && dup.replayed && dup.body == first.body:
	default:
		t.Fatalf("duplicate on the replica: %d replayed=%v %s", dup.status, dup.replayed, dup.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// testAnyOrder: several operations, each sent any number of times in any
// interleaving, spread over days within the retention: one effect per
// operation and every answer to an operation is its first answer. The
// sequences are drawn from fixed seeds (a failure names its seed), so
// the suite needs no property-testing library: a backend that runs it
// takes in nothing but this module's own dependencies.
func testAnyOrder(t *testing.T, e *env) {
	for seed := range uint64(anyOrderRuns) {
		rng := mrand.New(mrand.NewPCG(seed, 0x1de))
		nops := 1 + rng.IntN(4)
		keys, tags := make([]string, nops), make([]string, nops)
		for i := range nops {
			keys[i], tags[i] = newID(), newID()
		}
		firsts := make([]*response, nops)
		for i := range 1 + rng.IntN(20) {
			op := rng.IntN(nops)
			e.clock.Advance(time.Duration(rng.Int64N(int64(8 * time.Hour))))
			r := e.post(t, "alice", keys[op], `{"tag":"`+tags[op]+`"}`)
			if firsts[op] == nil {
				if r.status != http.StatusCreated || r.replayed {
					t.Fatalf("seed %d: first send of op %d: %d replayed=%v %s", seed, op, r.status, r.replayed, r.body)
				}
				firsts[op] = &r
				continue
			}
			if r.status != firsts[op].status || r.body != firsts[op].body || !r.replayed {
				t.Fatalf("seed %d: send %d of op %d: %d replayed=%v %s, want replay of %s", seed, i, op, r.status, r.replayed, r.body, firsts[op].body)
			}
		}
		for op := range nops {
			want := 0
			if firsts[op] != nil {
				want = 1
			}
			if n := e.effects(t, tags[op]); n != want {
				t.Fatalf("seed %d: op %d: effects = %d, want %d", seed, op, n, want)
			}
		}
	}
}

// anyOrderRuns is how many sequences testAnyOrder sends.
const anyOrderRuns = 100

func testExpiry(t *testing.T, e *env) {
	ctx := context.Background()
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	first := e.post(t, "alice", key, body)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if n, err := e.h.Store.Sweep(ctx, e.clock.Now().Add(idempotency.DefaultRetention-time.Nanosecond)); err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d, %v", n, err)
	}
	e.clock.Advance(idempotency.DefaultRetention - time.Nanosecond)
	if r := e.post(t, "alice", key, body); !r.replayed || r.body != first.body {
		t.Fatalf("just before expiry: %d replayed=%v", r.status, r.replayed)
	}
	// At expiry the record counts as gone even before a sweep: the key
	// runs again.
	e.clock.Advance(time.Nanosecond)
	second := e.post(t, "alice", key, body)
	if second.status != http.StatusCreated || second.replayed || second.body == first.body {
		t.Fatalf("at expiry: %d replayed=%v %s", second.status, second.replayed, second.body)
	}
	if n := e.effects(t, tag); n != 2 {
		t.Fatalf("effects = %d, want 2", n)
	}
	// Sweep through a Sweeper on the same clock.
	other := newID()
	if r := e.post(t, "bob", other, `{"tag":"`+newID()+`"}`); r.status != http.StatusCreated {
		t.Fatalf("bob: %d", r.status)
	}
	e.clock.Advance(idempotency.DefaultRetention)
	sw, err := idempotency.NewSweeper(idempotency.SweeperConfig{Store: e.h.Store, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sw.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want 2", n, err)
	}
	if rec := e.record(t, "alice", key); rec != nil {
		t.Fatalf("swept record still there: %+v", rec)
	}
	if rec := e.record(t, "bob", other); rec != nil {
		t.Fatalf("swept record still there: %+v", rec)
	}
	if n, err := sw.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v", n, err)
	}
	// The loop starts, sweeps and stops; Stop is safe twice.
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sw.Stop(ctx)
	sw.Stop(ctx)
}

func testTxContract(t *testing.T, e *env) {
	ctx := context.Background()
	now := e.clock.Now()
	rec := &idempotency.Record{Actor: "alice", Key: newID(), Operation: "test", Fingerprint: idempotency.Fingerprint("POST", "/", nil, nil),
		Status: idempotency.StatusProcessing, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}

	tx, err := e.h.Store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Complete(ctx, rec); err != idempotency.ErrNotReserved {
		t.Fatalf("Complete without Reserve: %v, want ErrNotReserved", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("second Rollback: %v", err)
	}

	tx, err = e.h.Store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := tx.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve: %+v, %v", old, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.record(t, "alice", rec.Key); got != nil {
		t.Fatalf("rolled back reservation visible: %+v", got)
	}

	tx, err = e.h.Store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := tx.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve: %+v, %v", old, err)
	}
	done := *rec
	done.Status, done.ResponseStatus, done.ResponseBody, done.CompletedAt = idempotency.StatusCompleted, 204, nil, now
	done.ResponseHeader = http.Header{"X-Test": {"1"}}
	if err := tx.Complete(ctx, &done); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != idempotency.ErrTxDone {
		t.Fatalf("second Commit: %v, want ErrTxDone", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback after Commit: %v", err)
	}
	got := e.record(t, "alice", rec.Key)
	if got == nil || got.Status != idempotency.StatusCompleted || got.ResponseStatus != 204 || got.Fingerprint != rec.Fingerprint ||
		got.Operation != "test" || got.ResponseHeader.Get("X-Test") != "1" || len(got.ResponseBody) != 0 {
		t.Fatalf("committed record = %+v", got)
	}

	tx, err = e.h.Store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	again := *rec
	old, err := tx.Reserve(ctx, &again, now)
	if err != nil || old == nil || old.Status != idempotency.StatusCompleted {
		t.Fatalf("Reserve of a completed key: %+v, %v", old, err)
	}
}

// tb is the part of testing.TB the helpers use; goTB has it too.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// goTB reports failures from a goroutine other than the test's: it marks
// the test failed and ends the goroutine.
type goTB struct{ t *testing.T }

func (g goTB) Helper()           {}
func (g goTB) Fatal(args ...any) { g.t.Error(args...); runtime.Goexit() }
func (g goTB) Fatalf(format string, args ...any) {
	g.t.Errorf(format, args...)
	runtime.Goexit()
}

// testCompletedConcurrentResends: after a request completed, many
// identical resends at once with the default configuration (no in-flight
// wait), to one gate and spread over two replicas, all get the stored
// answer replayed: a completed key never answers 409.
func testCompletedConcurrentResends(t *testing.T, e *env) {
	cfg := e.cfg
	cfg.InFlightWait = 0
	one := httptest.NewServer(e.gate(t, cfg))
	defer one.Close()
	if e.h.Replica != nil {
		cfg.Store = e.h.Replica(t)
	}
	two := httptest.NewServer(e.gate(t, cfg))
	defer two.Close()

	const n = 20
	for _, urls := range [][]string{{one.URL}, {one.URL, two.URL}} {
		for round := range 3 {
			key, tag := newID(), newID()
			body := `{"tag":"` + tag + `"}`
			first := e.send(t, one.URL+"/things", "alice", key, body)
			if first.status != http.StatusCreated || first.replayed {
				t.Fatalf("first: %d replayed=%v %s", first.status, first.replayed, first.body)
			}
			resps := make([]response, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					resps[i] = e.send(goTB{t}, urls[i%len(urls)]+"/things", "alice", key, body)
				})
			}
			close(start)
			wg.Wait()
			for i, r := range resps {
				if r.status != http.StatusCreated || !r.replayed || r.body != first.body {
					t.Fatalf("%d gate(s), round %d: resend %d is %d replayed=%v %s, want the replay of %s",
						len(urls), round, i, r.status, r.replayed, r.body, first.body)
				}
			}
			if got := e.effects(t, tag); got != 1 {
				t.Fatalf("effects = %d, want 1", got)
			}
		}
	}
}

// testDeepJSON: a JSON body nested deeper than the limit is refused with
// 400 json_too_deep before anything runs; one at the limit runs.
func testDeepJSON(t *testing.T, e *env) {
	tag := newID()
	nested := func(depth int) string { // the object is the first level
		return `{"tag":"` + tag + `","d":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	if r := e.post(t, "alice", newID(), nested(idempotency.DefaultMaxJSONDepth)); r.status != http.StatusCreated {
		t.Fatalf("depth %d: %d %s", idempotency.DefaultMaxJSONDepth, r.status, r.body)
	}
	for _, depth := range []int{idempotency.DefaultMaxJSONDepth + 1, 300_000} {
		r := e.post(t, "alice", newID(), nested(depth))
		if r.status != http.StatusBadRequest || errorCode(t, r.body) != idempotency.CodeJSONTooDeep {
			t.Fatalf("depth %d: %d %.200s, want 400 %s", depth, r.status, r.body, idempotency.CodeJSONTooDeep)
		}
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1 (the body at the limit only)", n)
	}
}

// testLostAtCommit: the store's connection is cut just before the
// commit. The gate cannot know whether the commit happened, says so, and
// answers with a status clients retry (503 outcome_unknown, with
// Retry-After); the retry with the same key runs or replays, and the
// effect happens once.
func testLostAtCommit(t *testing.T, e *env) {
	if e.h.Kill == nil {
		t.Skip("the store has no connection to lose")
	}
	cfg := e.cfg
	var killed atomic.Bool
	cfg.TestHookBeforeCommit = func(ctx context.Context) {
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
	r := e.send(t, srv.URL+"/things", "alice", key, body)
	if r.status != http.StatusServiceUnavailable || errorCode(t, r.body) != idempotency.CodeOutcomeUnknown || r.header.Get("Retry-After") == "" {
		t.Fatalf("commit on a lost connection: %d Retry-After=%q %s, want 503 %s", r.status, r.header.Get("Retry-After"), r.body, idempotency.CodeOutcomeUnknown)
	}
	if !strings.Contains(r.body, "same Idempotency-Key") {
		t.Fatalf("the message does not tell the client to retry with the same key: %s", r.body)
	}
	again := e.send(t, srv.URL+"/things", "alice", key, body)
	if again.status != http.StatusCreated {
		t.Fatalf("retry: %d %s", again.status, again.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}
