package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Defaults of BatchConfig.
const (
	DefaultBatchMaxOperations = 100
	DefaultBatchMaxBytes      = 8 << 20
)

// BatchConfig configures BatchHandler.
type BatchConfig struct {
	// Handler serves each operation of a batch as if it had been sent
	// alone: the routes with their gate (the same mux the single
	// requests reach, after authentication).
	Handler http.Handler
	// Store, when it is a GroupStore (boltstore, pgstore), makes the
	// operations of a batch commit together: they run one after another
	// as members of one group transaction, so a batch costs one commit
	// (one fsync on bbolt, one COMMIT on PostgreSQL) instead of one per
	// operation. It must be the Store of the gate in front of Handler's
	// routes: a route gated on another store runs in a transaction of
	// its own, which on bbolt waits for the group's writer lock forever.
	// Nil, or a Store without groups: each operation commits on its own.
	Store Store
	// MaxOperations and MaxBytes bound a batch (DefaultBatchMaxOperations,
	// DefaultBatchMaxBytes); a larger one answers 413.
	MaxOperations int
	MaxBytes      int64
	// WriteError writes an error answer of the batch itself (default
	// WriteError).
	WriteError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	// Chain, when set, lets an operation name an earlier one of its
	// batch ("after": its index) and be run only after it was applied:
	// the batch handler runs it only when that one answered 2xx and
	// Chain, given that operation, its answer and this operation, says
	// yes (it may rewrite op, before the gate fingerprints it); otherwise
	// it answers 424 dependency_failed without running it, and nothing
	// is stored for its key. Capabilities then advertise "chains": true.
	// ChainVersions is the rule of syncd's remote protocol. Nil: "after"
	// is refused (400), and nothing is advertised.
	Chain func(prev BatchOperation, prevResult BatchResult, op *BatchOperation) bool
	// ResultHeaders are the headers of an operation's answer that its
	// result carries ("headers"): the result headers the gate stores and
	// replays (default DefaultReplayedHeaders; set it to the gate's
	// Config.ReplayedHeaders if those differ), so an operation's first
	// answer and its replays carry the same ones. Others (Date,
	// X-Request-Id) are left out.
	ResultHeaders []string
}

// BatchOperation is one operation of a batch request.
type BatchOperation struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Body           json.RawMessage `json:"body,omitempty"`
	// After, when set, is the index of an earlier operation of the
	// batch that must be applied before this one runs (BatchConfig.Chain).
	After *int `json:"after,omitempty"`
}

// BatchResult is the answer to one operation of a batch.
type BatchResult struct {
	Status   int             `json:"status"`
	Body     json.RawMessage `json:"body,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	// RetryAfter is the operation's Retry-After, in seconds, when it
	// had one (a 409 in flight, a 429, a 503).
	RetryAfter int `json:"retryAfter,omitempty"`
	// Headers are the operation's result headers, those named in
	// BatchConfig.ResultHeaders that its answer carries: its Location,
	// ETag, Content-Type. A text answer's body is a JSON string.
	Headers http.Header `json:"headers,omitempty"`
}

// Capabilities returns the batch part of GET /v1/capabilities:
// maxOperations, maxBytes, and chains when Chain is set.
func (c BatchConfig) Capabilities() map[string]any {
	c = c.withDefaults()
	caps := map[string]any{"maxOperations": int64(c.MaxOperations), "maxBytes": c.MaxBytes}
	if c.Chain != nil {
		caps["chains"] = true
	}
	return caps
}

// ChainVersions is BatchConfig.Chain for syncd's remote protocol: an
// update (PATCH) chained after another update of the same record is
// made on the version that one produced. It runs when the earlier
// answer holds exactly the data that was sent (the server applied it
// as it was, merging nothing of other writers into it), and its body's
// baseVersion is then set to that answer's version; the request is the
// same, byte for byte in its fingerprint, as the one a client sends
// alone once it has the earlier answer, so a resend either way replays.
// An earlier answer that merged other changes in is not what the chained
// update was made on: it is not run (424), and goes alone, as made.
func ChainVersions(prev BatchOperation, prevResult BatchResult, op *BatchOperation) bool {
	if op.Method != http.MethodPatch || prev.Method != http.MethodPatch {
		return false
	}
	var sent struct {
		Data json.RawMessage `json:"data"`
	}
	var got struct {
		Data    json.RawMessage `json:"data"`
		Version json.Number     `json:"version"`
	}
	if json.Unmarshal(prev.Body, &sent) != nil || json.Unmarshal(prevResult.Body, &got) != nil {
		return false
	}
	v, err := got.Version.Int64()
	if err != nil || v <= 0 || len(sent.Data) == 0 {
		return false
	}
	if a, ok := canonicalJSON(sent.Data); !ok {
		return false
	} else if b, ok := canonicalJSON(got.Data); !ok || a != b {
		return false
	}
	body, ok := parseJSON(op.Body)
	obj, isObj := body.(map[string]any)
	if !ok || !isObj {
		return false
	}
	obj["baseVersion"] = json.Number(strconv.FormatInt(v, 10))
	b, err := encodeJSON(obj)
	if err != nil {
		return false
	}
	op.Body = b
	return true
}

// runnable reports whether operation i of a batch may run, after the
// operation it names in After (see BatchConfig.Chain); if not, the
// result it answers instead.
func runnable(cfg BatchConfig, outer *http.Request, ops []BatchOperation, results []BatchResult, i int) (BatchResult, bool) {
	after := ops[i].After
	if after == nil {
		return BatchResult{}, true
	}
	fail := func(status int, code, msg string) (BatchResult, bool) {
		return errorResult(cfg, outer, status, code, msg), false
	}
	if cfg.Chain == nil {
		return fail(http.StatusBadRequest, CodeBadRequest, "this server does not chain operations: leave out after")
	}
	j := *after
	if j < 0 || j >= i {
		return fail(http.StatusBadRequest, CodeBadRequest, "after must be the index of an earlier operation of the batch")
	}
	if st := results[j].Status; st < 200 || st > 299 {
		return fail(http.StatusFailedDependency, CodeDependencyFailed,
			fmt.Sprintf("operation %d, which this one follows, was not applied (%d): nothing was done; send this one again once it is", j, st))
	}
	if !cfg.Chain(ops[j], results[j], &ops[i]) {
		return fail(http.StatusFailedDependency, CodeDependencyFailed,
			fmt.Sprintf("operation %d, which this one follows, was not applied as sent: nothing was done; send this one on its own", j))
	}
	return BatchResult{}, true
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.MaxOperations <= 0 {
		c.MaxOperations = DefaultBatchMaxOperations
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultBatchMaxBytes
	}
	if c.WriteError == nil {
		c.WriteError = WriteError
	}
	if c.ResultHeaders == nil {
		c.ResultHeaders = DefaultReplayedHeaders
	}
	return c
}

// BatchHandler serves POST /v1/batch {"operations":[{idempotencyKey,
// method, path, body}, ...]} → 200 {"results":[{status, body, replayed,
// retryAfter?}, ...]} in order. Each operation goes through
// cfg.Handler on its own, with its own Idempotency-Key, the batch's
// Authorization and the batch request's context: its own gate record,
// fingerprint, replay, in-flight 409 and 422, exactly as if it had been
// sent alone. A batch resent after a lost answer therefore replays item
// by item. The operations run one after another, in order; a failed one
// does not stop the others.
//
// With a GroupStore in cfg.Store the operations commit together, in one
// group transaction, and the answer is sent after that commit. An
// operation whose answer is not stored (5xx, 401, ...) rolls back its
// own writes only: on PostgreSQL to its savepoint; on bbolt, which has
// none, the group is rolled back and the operations before it run again
// in a new group (bbolt's own DB.Batch rule), so a handler may run more
// than once for one answer, as the gate allows (its effects outside the
// transaction are not covered). An operation whose key is held in this
// process (earlier in this batch, or by a request that Config.InFlightWait
// would wait for) runs on its own after the group commits. When the
// group's commit fails, the operations that ran in it answer 503
// outcome_unknown (500 internal when the store is sure nothing
// committed): a retry with the same keys replays or runs them.
func BatchHandler(cfg BatchConfig) http.Handler {
	cfg = cfg.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, cfg.MaxBytes+1))
		if err != nil {
			cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, "reading the request body failed")
			return
		}
		if int64(len(body)) > cfg.MaxBytes {
			cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("a batch is at most %d bytes", cfg.MaxBytes))
			return
		}
		var req struct {
			Operations []BatchOperation `json:"operations"`
		}
		// An item's body sits three levels down ({"operations":[{"body":
		// ...}]}): the batch allows that much more than one request, and
		// the gate checks each item against its own limit.
		if code, msg := ambiguousJSON(body, DefaultMaxJSONDepth+3); code != "" {
			cfg.WriteError(w, r, http.StatusBadRequest, code, msg)
			return
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Operations) == 0 {
			cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, `the body must be {"operations":[...]} with at least one operation`)
			return
		}
		if len(req.Operations) > cfg.MaxOperations {
			cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("a batch holds at most %d operations", cfg.MaxOperations))
			return
		}
		results := make([]BatchResult, len(req.Operations))
		if gs, ok := cfg.Store.(GroupStore); ok {
			(&batchRun{cfg: cfg, outer: r, ops: req.Operations, results: results}).grouped(gs, 0, len(results))
		} else {
			for i := range req.Operations {
				if res, ok := runnable(cfg, r, req.Operations, results, i); !ok {
					results[i] = res
					continue
				}
				results[i] = serveOne(cfg, r, req.Operations[i], nil)
			}
		}
		b, err := json.Marshal(struct {
			Results []BatchResult `json:"results"`
		}{results})
		if err != nil {
			cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "encoding the results failed")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
	})
}

// serveOne runs one operation of a batch through cfg.Handler; item, if
// not nil, makes it a member of the batch's group.
func serveOne(cfg BatchConfig, outer *http.Request, op BatchOperation, item *batchItem) BatchResult {
	refuse := func(msg string) BatchResult {
		return errorResult(cfg, outer, http.StatusBadRequest, CodeBadRequest, msg)
	}
	switch op.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
	default:
		return refuse("method must be POST, PATCH, PUT or DELETE")
	}
	if !strings.HasPrefix(op.Path, "/") || strings.HasPrefix(op.Path, "//") || strings.Contains(op.Path, "/../") ||
		strings.HasSuffix(op.Path, "/..") || strings.Contains(op.Path, "#") {
		return refuse("path must be an absolute path on this server")
	}
	ctx := outer.Context()
	if item != nil {
		ctx = context.WithValue(ctx, batchItemKey{}, item)
	}
	sub, err := http.NewRequestWithContext(ctx, op.Method, op.Path, bytes.NewReader(op.Body))
	if err != nil {
		return refuse("path: " + err.Error())
	}
	// The path as the routes read it: "/v1/%62atch" and "/v1//batch"
	// are the batch route too.
	if path.Clean(sub.URL.Path) == path.Clean(outer.URL.Path) {
		return refuse("a batch cannot hold a batch")
	}
	sub.Host, sub.RemoteAddr = outer.Host, outer.RemoteAddr
	sub.Header.Set("Authorization", outer.Header.Get("Authorization"))
	if op.IdempotencyKey != "" {
		sub.Header.Set(HeaderKey, op.IdempotencyKey)
	}
	if len(op.Body) > 0 {
		sub.Header.Set("Content-Type", "application/json")
	}
	rec := newRecorder(1 << 62)
	cfg.Handler.ServeHTTP(rec, sub)
	return resultOf(cfg, rec)
}

// errorResult is an operation's error result, written by
// BatchConfig.WriteError as the gate's and the handlers' errors are.
func errorResult(cfg BatchConfig, outer *http.Request, status int, code, msg string) BatchResult {
	rec := newRecorder(1 << 20)
	cfg.WriteError(rec, outer, status, code, msg)
	return resultOf(cfg, rec)
}

// resultOf is the batch result of an operation's answer.
func resultOf(cfg BatchConfig, rec *recorder) BatchResult {
	res := BatchResult{Status: rec.status, Replayed: rec.header.Get(HeaderReplayed) == "true"}
	for _, name := range cfg.ResultHeaders {
		if v := rec.header.Values(name); len(v) > 0 {
			if res.Headers == nil {
				res.Headers = make(http.Header)
			}
			res.Headers[http.CanonicalHeaderKey(name)] = slices.Clone(v)
		}
	}
	if ra, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && ra > 0 {
		res.RetryAfter = ra
	}
	if body := bytes.TrimSpace(rec.body.Bytes()); len(body) > 0 {
		if json.Valid(body) {
			res.Body = body
		} else {
			res.Body, _ = json.Marshal(string(body))
		}
	}
	return res
}

// batchRun runs the operations of one batch in group transactions.
type batchRun struct {
	cfg     BatchConfig
	outer   *http.Request
	ops     []BatchOperation
	results []BatchResult
}

// groupRun is one group transaction of a batch and the in-flight slots
// of the keys its members hold.
type groupRun struct {
	store Store
	group TxGroup
	held  map[string]func()
	ended bool
}

// batchItem is one operation of a batch, in its request's context: the
// gate of its route (the one on the group's store) runs its transaction
// as a member of the group and says what became of it.
type batchItem struct {
	run      *groupRun
	claimed  bool // a gate took it; a gate nested in the handler does not
	executed bool // its answer is stored in the group, to commit with it
	yield    bool // the gate left it to run on its own after the group
}

type batchItemKey struct{}

// errYield is what the gate's execution returns for a batchItem it left
// to run on its own; it answers nothing.
var errYield = errors.New("idempotency: the operation runs after its batch's group")

// groupItem returns the batch operation the request in ctx is, if its
// group is on this gate's store and no other gate took it.
func (g *Gate) groupItem(ctx context.Context) *batchItem {
	item, _ := ctx.Value(batchItemKey{}).(*batchItem)
	if item == nil || item.claimed || !sameStore(item.run.store, g.cfg.Store) {
		return nil
	}
	item.claimed = true
	return item
}

func sameStore(a, b Store) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// grouped runs the operations lo..hi-1, as many at a time as share a
// group.
func (b *batchRun) grouped(gs GroupStore, lo, hi int) {
	for lo < hi {
		lo = b.groupOnce(gs, lo, hi)
	}
}

// groupOnce runs operations from lo in one group and returns the first
// operation it did not settle.
func (b *batchRun) groupOnce(gs GroupStore, lo, hi int) int {
	ctx := b.outer.Context()
	grp, err := gs.BeginGroup(ctx)
	if err != nil {
		// The operation on its own answers as the store lets it.
		b.results[lo] = serveOne(b.cfg, b.outer, b.ops[lo], nil)
		return lo + 1
	}
	run := &groupRun{store: b.cfg.Store, group: grp, held: make(map[string]func())}
	defer run.end(ctx, false) // a panicking handler: roll back, free the keys
	var executed []int
	for i := lo; i < hi; i++ {
		if res, ok := runnable(b.cfg, b.outer, b.ops, b.results, i); !ok {
			b.results[i] = res
			continue
		}
		item := &batchItem{run: run}
		res := serveOne(b.cfg, b.outer, b.ops[i], item)
		switch {
		case item.yield:
			b.commit(ctx, run, executed)
			b.results[i] = serveOne(b.cfg, b.outer, b.ops[i], nil)
			return i + 1
		case grp.Broken():
			// Nothing of the group commits. The operation that broke it
			// was rolled back, and its answer (not stored) stands, unless
			// its member had committed; those before it run again.
			run.end(ctx, false)
			end := i
			if item.executed {
				end = i + 1
			} else {
				b.results[i] = res
			}
			b.grouped(gs, lo, end)
			return i + 1
		}
		b.results[i] = res
		if item.executed {
			executed = append(executed, i)
		}
	}
	b.commit(ctx, run, executed)
	return hi
}

// commit commits the group; if that fails, the operations that executed
// in it answer that their outcome is unknown (or, when the store is sure
// nothing committed, that nothing was done).
func (b *batchRun) commit(ctx context.Context, run *groupRun, executed []int) {
	// As for a single request: operations that answered commit even if
	// the batch's client has gone.
	if err := run.end(context.WithoutCancel(ctx), true); err != nil {
		var res BatchResult
		if errors.Is(err, ErrTxAborted) || errors.Is(err, ErrGroupBroken) {
			res = errorResult(b.cfg, b.outer, http.StatusInternalServerError, CodeInternal,
				"the batch's transaction failed; nothing was done")
		} else {
			res = errorResult(b.cfg, b.outer, http.StatusServiceUnavailable, CodeOutcomeUnknown,
				"the idempotency store failed while committing the batch; whether the operation took effect is unknown: "+
					"retry with the same Idempotency-Key, which replays the answer if it did and runs the operation if it did not")
			res.RetryAfter = int(DefaultRetryAfter.Seconds())
		}
		for _, i := range executed {
			b.results[i] = res
		}
	}
}

// end commits (commit) or rolls back the group, once, and frees its
// keys' in-flight slots after that.
func (run *groupRun) end(ctx context.Context, commit bool) error {
	if run.ended {
		return nil
	}
	run.ended = true
	defer func() {
		for _, release := range run.held {
			release()
		}
	}()
	if commit {
		if run.group.Broken() {
			_ = run.group.Rollback(context.WithoutCancel(ctx))
			return ErrGroupBroken
		}
		err := run.group.Commit(ctx)
		if err != nil {
			_ = run.group.Rollback(context.WithoutCancel(ctx))
		}
		return err
	}
	return run.group.Rollback(context.WithoutCancel(ctx))
}
