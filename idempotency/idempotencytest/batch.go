package idempotencytest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncd/syncd/idempotency"
)

// The cases of this file: a statement that fails inside the handler
// (PostgreSQL aborts the transaction), and batches whose operations
// commit together (idempotency.BatchHandler on the harness's store).

// testFailedStatementThenRefusal: the natural PostgreSQL handler (write,
// a statement fails — a unique violation —, answer 409) gets its refusal
// stored and replayed, without the writes it made; it must not answer
// 5xx, which a client retries for ever.
func testFailedStatementThenRefusal(t *testing.T, e *env) {
	if e.h.FailStatement == nil {
		t.Skip("the store's transactions are not aborted by a failed statement")
	}
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setHook(func(r *http.Request) int {
		if err := e.h.FailStatement(r.Context()); err == nil {
			t.Error("FailStatement did not fail")
		}
		return http.StatusConflict
	})
	first := e.post(t, "alice", key, body)
	if first.status != http.StatusConflict || errorCode(t, first.body) != "hooked" {
		t.Fatalf("refusal after a failed statement: %d %s, want the handler's 409", first.status, first.body)
	}
	e.setHook(func(*http.Request) int { return 0 })
	again := e.post(t, "alice", key, body)
	if again.status != http.StatusConflict || !again.replayed || again.body != first.body {
		t.Fatalf("resend: %d replayed=%v %s, want the stored 409", again.status, again.replayed, again.body)
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("effects = %d, want 0: the writes before the failed statement are rolled back to the gate's savepoint", n)
	}
	if rec := e.record(t, "alice", key); rec == nil || rec.Status != idempotency.StatusCompleted || rec.ResponseStatus != http.StatusConflict {
		t.Fatalf("record %+v, want the completed 409", rec)
	}
}

// testFailedStatementThenSuccess: a handler that answers success after
// one of its statements failed did nothing (the transaction is aborted):
// the client hears 500 internal, nothing was done, not 503
// outcome_unknown; nothing is stored and a resend runs.
func testFailedStatementThenSuccess(t *testing.T, e *env) {
	if e.h.FailStatement == nil {
		t.Skip("the store's transactions are not aborted by a failed statement")
	}
	key, tag := newID(), newID()
	body := `{"tag":"` + tag + `"}`
	e.setHook(func(r *http.Request) int {
		_ = e.h.FailStatement(r.Context())
		return 0 // the handler answers 201 anyway
	})
	r := e.post(t, "alice", key, body)
	if r.status != http.StatusInternalServerError || errorCode(t, r.body) != idempotency.CodeInternal || !bytes.Contains([]byte(r.body), []byte("nothing was done")) {
		t.Fatalf("success after a failed statement: %d %s, want 500 %s, nothing was done", r.status, r.body, idempotency.CodeInternal)
	}
	if n := e.effects(t, tag); n != 0 {
		t.Fatalf("effects = %d, want 0", n)
	}
	if rec := e.record(t, "alice", key); rec != nil {
		t.Fatalf("record %+v stored", rec)
	}
	e.setHook(func(*http.Request) int { return 0 })
	if again := e.post(t, "alice", key, body); again.status != http.StatusCreated || again.replayed {
		t.Fatalf("resend: %d replayed=%v %s", again.status, again.replayed, again.body)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
}

// batchOp is one operation of a test batch: a POST /things with its key
// and the body {"tag":tag}.
type batchOp struct{ key, tag string }

// batchURL serves POST /batch, whose operations go through a gate made
// from cfg (the actor is the Authorization header, which a batch passes
// on) in front of the test handler, and commit together on the
// harness's store.
func (e *env) batchURL(t *testing.T, cfg idempotency.Config) string {
	t.Helper()
	cfg.Actor = func(r *http.Request) (string, error) { return r.Header.Get("Authorization"), nil }
	mux := http.NewServeMux()
	mux.Handle("POST /things", e.gate(t, cfg))
	mux.Handle("POST /batch", idempotency.BatchHandler(idempotency.BatchConfig{Handler: mux, Store: cfg.Store}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/batch"
}

func (e *env) sendBatch(t tb, url, actor string, ops []batchOp) []idempotency.BatchResult {
	t.Helper()
	items := make([]idempotency.BatchOperation, len(ops))
	for i, op := range ops {
		items[i] = idempotency.BatchOperation{IdempotencyKey: op.key, Method: http.MethodPost, Path: "/things",
			Body: json.RawMessage(`{"tag":"` + op.tag + `"}`)}
	}
	body, _ := json.Marshal(map[string]any{"operations": items})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", actor)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out struct{ Results []idempotency.BatchResult }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Results) != len(ops) {
		t.Fatalf("batch: %d %v, %d results for %d operations", resp.StatusCode, err, len(out.Results), len(ops))
	}
	return out.Results
}

func newOps(n int) []batchOp {
	ops := make([]batchOp, n)
	for i := range ops {
		ops[i] = batchOp{newID(), newID()}
	}
	return ops
}

// checkReplays sends ops again, alone and as a batch, and checks that
// each operation whose first answer was stored (want[i] true) replays it
// byte for byte: the answer a batch returned is the one that committed.
func (e *env) checkReplays(t *testing.T, url string, ops []batchOp, first []idempotency.BatchResult, want []bool) {
	t.Helper()
	again := e.sendBatch(t, url, "alice", ops)
	for i, op := range ops {
		if !want[i] {
			continue
		}
		if a := again[i]; a.Status != first[i].Status || !a.Replayed || !bytes.Equal(a.Body, first[i].Body) {
			t.Fatalf("operation %d in the batch resent: %d replayed=%v %s, want the replay of %d %s",
				i, a.Status, a.Replayed, a.Body, first[i].Status, first[i].Body)
		}
		single := e.post(t, "alice", op.key, `{"tag":"`+op.tag+`"}`)
		// A batch result's body is the answer without its trailing
		// white space.
		if single.status != first[i].Status || !single.replayed || strings.TrimSpace(single.body) != string(first[i].Body) {
			t.Fatalf("operation %d resent alone: %d replayed=%v %s, want the replay of %d %s",
				i, single.status, single.replayed, single.body, first[i].Status, first[i].Body)
		}
	}
}

// testBatchCommitsTogether: a batch's operations each run once, keep
// their own record and replay item by item, in a batch or alone; a key
// reused with another request in a batch is 422.
func testBatchCommitsTogether(t *testing.T, e *env) {
	url := e.batchURL(t, e.cfg)
	ops := newOps(5)
	first := e.sendBatch(t, url, "alice", ops)
	for i, r := range first {
		if r.Status != http.StatusCreated || r.Replayed {
			t.Fatalf("operation %d: %d replayed=%v %s", i, r.Status, r.Replayed, r.Body)
		}
		if n := e.effects(t, ops[i].tag); n != 1 {
			t.Fatalf("operation %d: effects = %d, want 1", i, n)
		}
		if rec := e.record(t, "alice", ops[i].key); rec == nil || rec.Status != idempotency.StatusCompleted || string(rec.ResponseBody) != string(first[i].Body) {
			t.Fatalf("operation %d: record %+v", i, rec)
		}
	}
	e.checkReplays(t, url, ops, first, []bool{true, true, true, true, true})

	mixed := []batchOp{{newID(), newID()}, ops[1], {ops[2].key, newID()}}
	got := e.sendBatch(t, url, "alice", mixed)
	if got[0].Status != http.StatusCreated || got[0].Replayed || !got[1].Replayed || !bytes.Equal(got[1].Body, first[1].Body) ||
		got[2].Status != http.StatusUnprocessableEntity {
		t.Fatalf("new, resent, reused: %+v", got)
	}
	for i := range ops {
		if n := e.effects(t, ops[i].tag); n != 1 {
			t.Fatalf("operation %d: effects = %d after the resends, want 1", i, n)
		}
	}
}

// testBatchItemRolledBack: an operation whose answer is not stored (a
// 503, a 401) commits nothing of its own, and the others commit (on a
// store without savepoints, after running again: the answers they
// return must be the ones stored); a resend replays them and runs it.
// A business refusal in a batch is stored with its writes.
func testBatchItemRolledBack(t *testing.T, e *env) {
	url := e.batchURL(t, e.cfg)
	ops := newOps(6)
	status := map[string]int{ops[1].key: http.StatusServiceUnavailable, ops[3].key: http.StatusConflict, ops[4].key: http.StatusUnauthorized}
	e.setHook(func(r *http.Request) int { return status[r.Header.Get(idempotency.HeaderKey)] })
	first := e.sendBatch(t, url, "alice", ops)
	want := []int{201, 503, 201, 409, 401, 201}
	for i, r := range first {
		if r.Status != want[i] {
			t.Fatalf("operation %d: %d %s, want %d", i, r.Status, r.Body, want[i])
		}
		effects := 1
		if want[i] == 503 || want[i] == 401 {
			effects = 0
		}
		if n := e.effects(t, ops[i].tag); n != effects {
			t.Fatalf("operation %d (%d): effects = %d, want %d", i, want[i], n, effects)
		}
	}
	e.setHook(func(*http.Request) int { return 0 })
	e.checkReplays(t, url, ops, first, []bool{true, false, true, true, false, true})
	for _, i := range []int{1, 4} {
		if n := e.effects(t, ops[i].tag); n != 1 {
			t.Fatalf("operation %d after the resend: effects = %d, want 1", i, n)
		}
	}
}

// testBatchSameKeyTwice: a key sent twice in one batch runs once; the
// second replays the first's answer, and a third with another body is
// 422, as if they had been sent one after another.
func testBatchSameKeyTwice(t *testing.T, e *env) {
	url := e.batchURL(t, e.cfg)
	key, tag := newID(), newID()
	got := e.sendBatch(t, url, "alice", []batchOp{{key, tag}, {newID(), newID()}, {key, tag}, {key, newID()}})
	if got[0].Status != http.StatusCreated || got[1].Status != http.StatusCreated ||
		got[2].Status != http.StatusCreated || !got[2].Replayed || !bytes.Equal(got[2].Body, got[0].Body) ||
		got[3].Status != http.StatusUnprocessableEntity {
		t.Fatalf("same key twice: %+v", got)
	}
	if n := e.effects(t, tag); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	// Without a wait for a key in flight (the draft's default), too.
	cfg := e.cfg
	cfg.InFlightWait = 0
	url = e.batchURL(t, cfg)
	key, tag = newID(), newID()
	got = e.sendBatch(t, url, "alice", []batchOp{{key, tag}, {key, tag}})
	if got[0].Status != http.StatusCreated || !got[1].Replayed || !bytes.Equal(got[1].Body, got[0].Body) {
		t.Fatalf("same key twice without InFlightWait: %+v", got)
	}
}

// testBatchConcurrent: batches and single requests with the same keys at
// once, in this process: each key runs once, and every answer it gets is
// that run's (or 409 in flight).
func testBatchConcurrent(t *testing.T, e *env) {
	url := e.batchURL(t, e.cfg)
	ops := newOps(8)
	var (
		mu      sync.Mutex
		answers = make(map[string]map[string]bool) // key → bodies of 201s
	)
	note := func(t tb, key string, status int, body string) {
		switch status {
		case http.StatusCreated:
			mu.Lock()
			if answers[key] == nil {
				answers[key] = make(map[string]bool)
			}
			answers[key][body] = true
			mu.Unlock()
		case http.StatusConflict:
			if errorCode(t, body) != idempotency.CodeInFlight {
				t.Fatalf("key %s: 409 %s", key, body)
			}
		default:
			t.Fatalf("key %s: %d %s", key, status, body)
		}
	}
	var wg sync.WaitGroup
	var started atomic.Int32
	for g := range 6 {
		wg.Go(func() {
			tt := goTB{t}
			started.Add(1)
			if g%2 == 0 {
				for i, r := range e.sendBatch(tt, url, "alice", ops) {
					note(tt, ops[i].key, r.Status, string(r.Body))
				}
				return
			}
			for i := range ops {
				op := ops[(i+g)%len(ops)]
				r := e.post(tt, "alice", op.key, `{"tag":"`+op.tag+`"}`)
				note(tt, op.key, r.status, r.body)
			}
		})
	}
	wg.Wait()
	for _, op := range ops {
		if n := e.effects(t, op.tag); n != 1 {
			t.Fatalf("key %s: effects = %d, want 1", op.key, n)
		}
		if len(answers[op.key]) > 1 {
			t.Fatalf("key %s: %d different answers: %v", op.key, len(answers[op.key]), answers[op.key])
		}
	}
}

// testBatchFailedStatement: in a batch, an operation whose statement
// failed and which refuses has its refusal stored, and the others
// commit.
func testBatchFailedStatement(t *testing.T, e *env) {
	if e.h.FailStatement == nil {
		t.Skip("the store's transactions are not aborted by a failed statement")
	}
	url := e.batchURL(t, e.cfg)
	ops := newOps(3)
	e.setHook(func(r *http.Request) int {
		if r.Header.Get(idempotency.HeaderKey) != ops[1].key {
			return 0
		}
		_ = e.h.FailStatement(r.Context())
		return http.StatusConflict
	})
	first := e.sendBatch(t, url, "alice", ops)
	if first[0].Status != 201 || first[1].Status != 409 || first[2].Status != 201 {
		t.Fatalf("batch with a failed statement: %+v", first)
	}
	for i, want := range []int{1, 0, 1} {
		if n := e.effects(t, ops[i].tag); n != want {
			t.Fatalf("operation %d: effects = %d, want %d", i, n, want)
		}
	}
	e.setHook(func(*http.Request) int { return 0 })
	e.checkReplays(t, url, ops, first, []bool{true, true, true})
}

// testBatchLostConnection: the group's connection is cut while an
// operation completes: that operation's outcome is unknown (503, retry
// with the same key); nothing of the group committed, so the operations
// before it run again in a new group, and those after it run too.
func testBatchLostConnection(t *testing.T, e *env) {
	if e.h.Kill == nil {
		t.Skip("the store has no connection to lose")
	}
	ops := newOps(5)
	cfg := e.cfg
	// The operations run in order, so the third completion is ops[2]'s.
	var completions atomic.Int32
	cfg.TestHookBeforeCommit = func(ctx context.Context) {
		if completions.Add(1) == 3 {
			if err := e.h.Kill(ctx); err != nil {
				t.Errorf("Kill: %v", err)
			}
		}
	}
	url := e.batchURL(t, cfg)
	first := e.sendBatch(t, url, "alice", ops)
	for i, r := range first {
		want := http.StatusCreated
		if i == 2 {
			want = http.StatusServiceUnavailable
		}
		if r.Status != want {
			t.Fatalf("operation %d: %d %s, want %d", i, r.Status, r.Body, want)
		}
	}
	if code := errorCode(t, string(first[2].Body)); code != idempotency.CodeOutcomeUnknown || first[2].RetryAfter == 0 {
		t.Fatalf("the cut operation: %s retryAfter=%d, want %s with a Retry-After", first[2].Body, first[2].RetryAfter, idempotency.CodeOutcomeUnknown)
	}
	e.checkReplays(t, url, ops, first, []bool{true, true, false, true, true})
	for i := range ops {
		if n := e.effects(t, ops[i].tag); n != 1 {
			t.Fatalf("operation %d: effects = %d, want 1", i, n)
		}
	}
}
