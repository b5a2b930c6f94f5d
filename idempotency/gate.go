package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

// Defaults for the zero values of Config.
const (
	DefaultRetention  = 7 * 24 * time.Hour
	DefaultRetryAfter = time.Second
	// DefaultProcessingLease is how long a processing record that was
	// committed without its answer (see Config.ProcessingLease) keeps its
	// key.
	DefaultProcessingLease = 5 * time.Minute
	// 1 MiB of data (syncd's default entity data limit) plus room for
	// the request's envelope.
	DefaultMaxBodyBytes = 1<<20 + 64<<10
	// DefaultMaxResponseBytes is the largest answer stored for replay:
	// room for an answer that echoes a request of DefaultMaxBodyBytes
	// even if re-encoding doubles it (U+2028 written as \u2028).
	DefaultMaxResponseBytes = 4 << 20
	// DefaultMaxJSONDepth is the deepest nesting of a JSON body the
	// gate accepts: the repository's JSON depth limit.
	DefaultMaxJSONDepth = jsonstrict.DefaultMaxDepth
	// MaxKeyLength is the longest Idempotency-Key accepted, in bytes.
	MaxKeyLength = 255
)

// DefaultReplayedHeaders are the response headers stored with an answer
// and replayed with it: those that describe the result. Hop-by-hop and
// per-request headers (Connection, Date, Set-Cookie, X-Request-Id, trace
// headers) are not.
var DefaultReplayedHeaders = []string{
	"Content-Type", "Content-Language", "Content-Location", "Location",
	"ETag", "Last-Modified", "Link", "Cache-Control",
}

// Header names.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// Outcome is what the gate did with one request; Config.OnOutcome
// receives it, for metrics.
type Outcome int

const (
	OutcomeExecuted     Outcome = iota // the handler ran and its response was stored
	OutcomeReplayed                    // a stored response was replayed
	OutcomeKeyReused                   // 422: same key, other fingerprint
	OutcomeInFlight                    // 409: same key still in flight
	OutcomeKeyMissing                  // 400: no (valid) key
	OutcomeRolledBack                  // the handler's answer is not stored (Config.Stored) or too large: nothing committed
	OutcomeFailed                      // the store failed: 500, nothing stored
	OutcomeUnauthorized                // 401: Config.Actor found no actor
	OutcomeTooLarge                    // 413: the body is over Config.MaxBodyBytes
	OutcomeBadRequest                  // 400: the body could not be read, is ambiguous JSON or nested too deep
	OutcomeUnknown                     // 503: completing or committing failed after the handler ran; it may have taken effect
)

var outcomeNames = [...]string{"executed", "replayed", "key_reused", "in_flight", "key_missing", "rolled_back", "failed",
	"unauthorized", "too_large", "bad_request", "unknown"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Config configures a Gate. Store and Actor are required; every other
// zero value means the default.
type Config struct {
	// Store keeps the records and hands the handler its transaction.
	Store Store
	// Actor returns the authenticated actor of a request; records are
	// scoped by (actor, key). An error answers 401 "unauthorized".
	// Required by Wrap (Do takes the actor as an argument).
	Actor func(*http.Request) (string, error)
	// Operation names the operation type of a request, stored with the
	// record and passed to OnOutcome. Default: r.Pattern when the gate
	// wraps a handler registered on a ServeMux, else "METHOD path".
	Operation func(*http.Request) string
	// Route is the route that goes into the fingerprint. Default:
	// DefaultRoute, the URL path and the query string with its
	// parameters sorted (so the same body sent to another resource, or
	// with ?dryRun=true instead of false, is another request).
	Route func(*http.Request) string
	// ExcludedFields are top-level body fields left out of the
	// fingerprint: attempt metadata the client changes between sends of
	// one operation (a sentAt, a trace id). Default: none; name only
	// fields that never change what the request does.
	ExcludedFields []string
	// Stored decides whether a handler's answer is final for its key:
	// stored for replay and committed with the handler's writes.
	// Default: Storable (everything but 401, 403, 408, 425, 429 and
	// 5xx). An answer not stored is rolled back, domain writes included,
	// and a retry with the same key runs the handler again.
	Stored func(status int) bool
	// Retention is how long a record is kept (DefaultRetention).
	Retention time.Duration
	// ProcessingLease bounds how long a processing record holds its key
	// if it is ever committed without its answer: by a Store that
	// commits reservations on their own, or by a handler that commits
	// the gate's transaction against the rules. After it, the key counts
	// as free and a retry runs again (DefaultProcessingLease). The
	// stores in this module never commit a processing record themselves.
	ProcessingLease time.Duration
	// InFlightWait is how long a duplicate of a request still running in
	// this process waits for it (and then replays its answer) before it
	// answers 409. Zero, the default, answers 409 with Retry-After at
	// once, as the IETF draft requires; a duplicate on another replica
	// always does.
	InFlightWait time.Duration
	// RetryAfter is sent with 409 in-flight answers (DefaultRetryAfter).
	RetryAfter time.Duration
	// MaxBodyBytes limits the request body read for the fingerprint
	// (DefaultMaxBodyBytes); a larger body answers 413.
	MaxBodyBytes int64
	// MaxResponseBytes limits the answer stored for replay
	// (DefaultMaxResponseBytes). A handler whose answer is larger is
	// rolled back, domain writes included, and the client gets 500
	// response_too_large: an effect whose answer cannot be replayed is
	// never committed.
	MaxResponseBytes int64
	// ReplayedHeaders are the response headers stored and replayed
	// (DefaultReplayedHeaders). Every other header the handler sets
	// reaches the first answer only.
	ReplayedHeaders []string
	// Now is the clock for record times and expiry (time.Now).
	Now func() time.Time
	// Logger gets debug lines for replays and warnings for failures. Keys
	// are logged only as a short hash. Default: discard.
	Logger *slog.Logger
	// OnOutcome, if set, is called once per gated request (for metrics).
	OnOutcome func(r *http.Request, operation string, o Outcome)
	// WriteError writes an error answer, the gate's and (through Error)
	// the handler's. Default: WriteError, which writes
	// {"error":{"code":...,"message":...}}; WriteProblem writes RFC 9457
	// problem details (application/problem+json) instead.
	WriteError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	// Rand returns a uniform value in [0, n), like (*rand.Rand).Int64N;
	// it draws the jitter of the Retry-After of 409 in-flight answers.
	// Default: math/rand/v2's Int64N. Tests pass a fixed one.
	Rand func(n int64) int64
	// MaxJSONDepth bounds the nesting of a JSON request body
	// (DefaultMaxJSONDepth); a deeper body answers 400 json_too_deep
	// before anything runs.
	MaxJSONDepth int
	// TestHookAfterReserve, if set, runs after a new reservation and
	// before the handler; its context carries the transaction
	// (TxFromContext). Tests use it to crash, stall or break a request
	// exactly there.
	TestHookAfterReserve func(ctx context.Context)
	// TestHookBeforeCommit, if set, runs after the handler's answer is
	// complete and before the commit, with the transaction in its
	// context. Tests use it to cut the store's connection at the commit.
	TestHookBeforeCommit func(ctx context.Context)
}

// Gate is the idempotency middleware. Requests with a safe method (GET,
// HEAD, OPTIONS, TRACE) pass through untouched. Every other request must
// carry an Idempotency-Key; the gate then, in one store transaction,
// reserves (actor, key), runs the handler with the transaction in its
// context, stores the response and commits, and only then sends the
// response. See the package documentation for the answers it gives.
//
// Do offers the same guarantee to code that is not an HTTP handler.
type Gate struct {
	cfg      Config
	replayed map[string]bool // canonical header names kept for replay
	inflight *inflight
	// reserveReads: the store's Reserve reads the record (ReadingStore),
	// so execute does not read it first.
	reserveReads bool
}

// New returns a Gate for cfg.
func New(cfg Config) (*Gate, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.ProcessingLease <= 0 {
		cfg.ProcessingLease = DefaultProcessingLease
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.ReplayedHeaders == nil {
		cfg.ReplayedHeaders = DefaultReplayedHeaders
	}
	if cfg.Stored == nil {
		cfg.Stored = Storable
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WriteError == nil {
		cfg.WriteError = WriteError
	}
	if cfg.Operation == nil {
		cfg.Operation = defaultOperation
	}
	if cfg.Route == nil {
		cfg.Route = DefaultRoute
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64N
	}
	if cfg.MaxJSONDepth <= 0 {
		cfg.MaxJSONDepth = DefaultMaxJSONDepth
	}
	g := &Gate{cfg: cfg, replayed: make(map[string]bool), inflight: inflightFor(cfg.Store)}
	if rs, ok := cfg.Store.(ReadingStore); ok {
		g.reserveReads = rs.ReserveReads()
	}
	for _, h := range cfg.ReplayedHeaders {
		g.replayed[http.CanonicalHeaderKey(h)] = true
	}
	return g, nil
}

// inflights holds one in-flight table per Store, so that every Gate on a
// store in this process (one per route, say) sees the others' requests.
var inflights sync.Map // Store → *inflight

func inflightFor(s Store) *inflight {
	fresh := &inflight{m: make(map[string]chan struct{})}
	if !reflect.TypeOf(s).Comparable() {
		return fresh // cannot be a map key: this gate keeps its own
	}
	v, _ := inflights.LoadOrStore(s, fresh)
	return v.(*inflight)
}

func defaultOperation(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.Path
}

// DefaultRoute is the default Config.Route: the URL path, and when there
// is a query, "?" and the query re-encoded with its parameters sorted
// by name (the order of values for one name is kept), so that
// ?a=1&b=2 and ?b=2&a=1 are one request and ?dryRun=true and
// ?dryRun=false are two.
func DefaultRoute(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return r.URL.Path
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// Not a form query: the raw text, exactly as sent.
		return r.URL.Path + "?" + r.URL.RawQuery
	}
	return r.URL.Path + "?" + q.Encode() // Encode sorts by name
}

// Retention returns the configured record retention.
func (g *Gate) Retention() time.Duration { return g.cfg.Retention }

// Wrap returns next behind the gate. It panics if Config.Actor is nil:
// the gate cannot scope keys without knowing who sends them.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	if g.cfg.Actor == nil {
		panic(ErrNoActor)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serve(w, r, next)
	})
}

// Safe reports whether method is one the gate lets through ungated.
func Safe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// answer is a handler's response as the gate keeps it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errResponseTooLarge is what an execution returns when its answer is
// over Config.MaxResponseBytes.
var errResponseTooLarge = errors.New("idempotency: the answer is larger than the gate stores")

func (g *Gate) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if Safe(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	op := g.cfg.Operation(r)
	outcome := func(o Outcome) {
		if g.cfg.OnOutcome != nil {
			g.cfg.OnOutcome(r, op, o)
		}
	}

	key, ok := parseKey(r.Header.Values(HeaderKey))
	if !ok {
		outcome(OutcomeKeyMissing)
		if len(r.Header.Values(HeaderKey)) == 0 {
			g.cfg.WriteError(w, r, http.StatusBadRequest, CodeKeyMissing, "the Idempotency-Key header is required for "+r.Method)
		} else {
			g.cfg.WriteError(w, r, http.StatusBadRequest, CodeKeyInvalid,
				fmt.Sprintf("the Idempotency-Key header must be one non-empty key of at most %d bytes", MaxKeyLength))
		}
		return
	}
	actor, err := g.cfg.Actor(r)
	if err != nil || actor == "" {
		outcome(OutcomeUnauthorized)
		g.cfg.WriteError(w, r, http.StatusUnauthorized, CodeUnauthorized, "no authenticated actor")
		return
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxBodyBytes+1))
		if err != nil {
			outcome(OutcomeBadRequest)
			g.cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, "reading the request body failed")
			return
		}
	}
	if int64(len(body)) > g.cfg.MaxBodyBytes {
		outcome(OutcomeTooLarge)
		g.cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge,
			fmt.Sprintf("the request body is larger than %d bytes", g.cfg.MaxBodyBytes))
		return
	}
	if code, msg := ambiguousJSON(body, g.cfg.MaxJSONDepth); code != "" {
		outcome(OutcomeBadRequest)
		g.cfg.WriteError(w, r, http.StatusBadRequest, code, msg)
		return
	}
	fp := FingerprintContent(r.Method, g.cfg.Route(r), r.Header.Get("Content-Type"), body, g.cfg.ExcludedFields)

	var rolledBack *answer // an answer sent but not stored
	o, ans, err := g.execute(ctx, actor, key, op, fp, func(txCtx context.Context) (*answer, error) {
		rr := newRecorder(g.cfg.MaxResponseBytes)
		r2 := r.WithContext(txCtx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		next.ServeHTTP(rr, r2)
		if rr.overflow {
			return nil, errResponseTooLarge
		}
		a := &answer{status: rr.status, header: rr.header, body: rr.body.Bytes()}
		if !g.cfg.Stored(a.status) {
			rolledBack = a
			return nil, errNotStored
		}
		return a, nil
	})
	if errors.Is(err, errYield) {
		return // the batch runs the operation again on its own
	}
	outcome(o)
	switch {
	case o == OutcomeInFlight:
		g.writeInFlight(w, r)
	case o == OutcomeKeyReused:
		g.cfg.WriteError(w, r, http.StatusUnprocessableEntity, CodeKeyReused,
			"this Idempotency-Key was already used with a different request")
	case o == OutcomeReplayed:
		writeAnswer(w, ans, true)
	case o == OutcomeExecuted:
		writeAnswer(w, ans, false)
	case rolledBack != nil:
		writeAnswer(w, rolledBack, false)
	case o == OutcomeUnknown:
		g.setRetryAfter(w)
		g.cfg.WriteError(w, r, http.StatusServiceUnavailable, CodeOutcomeUnknown,
			"the idempotency store failed while committing; whether the request took effect is unknown: "+
				"retry with the same Idempotency-Key, which replays the answer if it did and runs the request if it did not")
	case errors.Is(err, errResponseTooLarge):
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeResponseTooLarge,
			fmt.Sprintf("the answer is larger than the %d bytes the server stores for replay; nothing was done", g.cfg.MaxResponseBytes))
	case errors.Is(err, ErrTxAborted):
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal,
			"a statement of the handler failed and its transaction was aborted; nothing was done")
	default:
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "the idempotency store failed; nothing was done")
	}
}

// errNotStored is what the HTTP execution returns for an answer
// Config.Stored refuses: the transaction is rolled back.
var errNotStored = errors.New("idempotency: answer not stored")

// execute runs exec at most once in effect for (actor, key): it claims
// the key, runs exec with the store transaction in its context, stores
// the answer and commits, all in one transaction. It returns
//
//   - OutcomeExecuted and exec's answer, stored;
//   - OutcomeReplayed and the stored answer of an earlier execution;
//   - OutcomeKeyReused when the key was used with another fingerprint;
//   - OutcomeInFlight when another execution holds the key;
//   - OutcomeRolledBack and exec's error when exec failed: nothing
//     committed;
//   - OutcomeFailed and the store's error: nothing committed (an error
//     wrapping ErrTxAborted when a statement of exec failed and exec
//     still answered success);
//   - OutcomeUnknown when completing or committing failed after exec
//     ran.
//
// In an operation of a batch whose items commit together (a batchItem in
// ctx for this gate's store), the transaction is a member of the batch's
// group: "committed" means kept in the group, which the batch commits
// after its last item.
func (g *Gate) execute(ctx context.Context, actor, key, op, fp string, exec func(ctx context.Context) (*answer, error)) (Outcome, *answer, error) {
	log := &lazyLogger{base: g.cfg.Logger, op: op, key: key}
	item := g.groupItem(ctx)

	// A finished key is answered from one read of the committed record,
	// without the in-flight slot, a store transaction or a lock: however
	// many resends arrive together, on however many replicas, each gets
	// the stored answer. Not in a group: the read would need a second
	// connection while the group holds one, and with as many batches as
	// the pool has connections each would wait for another's; the
	// member's reservation reads the record instead. Nor on a store
	// whose reservation reads the record in its own round trip
	// (ReadingStore): it answers a finished key there, and a fresh
	// request does not pay for a read twice.
	if item == nil && !g.reserveReads {
		if o, ans, ok := g.lookup(ctx, log, actor, key, fp); ok {
			return o, ans, nil
		}
	}

	// Requests with the same (actor, key) in this process meet here, so
	// a duplicate never holds a store connection or the bbolt writer
	// lock while the first runs.
	slot := actor + "\x00" + key
	var (
		tx  Tx
		err error
	)
	if item != nil {
		// A member holds its slot until the group ends, so that a
		// duplicate never sees the key free before the answer commits.
		// It never waits for one: the group holds the store (bbolt's
		// writer lock, PostgreSQL's row locks) that the holder may need.
		// The key earlier in this batch, or a wait the configuration
		// asks for, is left to the batch, which runs the operation on its
		// own once the group has committed.
		if _, mine := item.run.held[slot]; mine {
			item.yield = true
			return 0, nil, errYield
		}
		release, ok := g.inflight.acquire(ctx, slot, 0)
		if !ok {
			if g.cfg.InFlightWait > 0 {
				item.yield = true
				return 0, nil, errYield
			}
			return g.inFlight(ctx, log, actor, key, fp)
		}
		item.run.held[slot] = release
		tx, err = item.run.group.Begin(ctx)
	} else {
		release, ok := g.inflight.acquire(ctx, slot, g.cfg.InFlightWait)
		if !ok {
			return g.inFlight(ctx, log, actor, key, fp)
		}
		defer release()
		tx, err = g.cfg.Store.Begin(ctx)
	}
	if err != nil {
		log.WarnContext(ctx, "idempotency: begin failed", slog.Any("err", err))
		return OutcomeFailed, nil, err
	}
	// Rollback after Commit does nothing; this also covers a panicking
	// handler, which must not keep the transaction (and with bbolt, the
	// writer lock) open.
	defer tx.Rollback(context.WithoutCancel(ctx))

	now := g.cfg.Now()
	rec := &Record{
		Actor:       actor,
		Key:         key,
		Operation:   op,
		Fingerprint: fp,
		Status:      StatusProcessing,
		CreatedAt:   now,
		// A processing record expires with its lease: were it ever
		// committed without its answer, the key frees itself.
		ExpiresAt: now.Add(g.cfg.ProcessingLease),
	}
	existing, err := tx.Reserve(ctx, rec, now)
	switch {
	case errors.Is(err, ErrInFlight):
		_ = tx.Rollback(ctx)
		return g.inFlight(ctx, log, actor, key, fp)
	case err != nil:
		log.WarnContext(ctx, "idempotency: reserve failed", slog.Any("err", err))
		return OutcomeFailed, nil, err
	case existing != nil:
		_ = tx.Rollback(ctx)
		switch {
		case existing.Fingerprint != fp:
			log.InfoContext(ctx, "idempotency: key reused with another request")
			return OutcomeKeyReused, nil, nil
		case existing.Status != StatusCompleted:
			return OutcomeInFlight, nil, nil
		default:
			log.DebugContext(ctx, "idempotency: replay")
			return OutcomeReplayed, &answer{existing.ResponseStatus, existing.ResponseHeader, existing.ResponseBody}, nil
		}
	}

	// The handler runs after a savepoint: if one of its statements fails
	// and it answers with a final refusal, the refusal is still stored.
	sp, savepoint := tx.(SavepointTx)
	if savepoint {
		if err := sp.Savepoint(ctx); err != nil {
			log.WarnContext(ctx, "idempotency: savepoint failed", slog.Any("err", err))
			return OutcomeFailed, nil, err
		}
	}

	txCtx := context.WithValue(ContextWithTx(ctx, tx), requestKey{}, &requestInfo{key: key, writeError: g.cfg.WriteError})
	if g.cfg.TestHookAfterReserve != nil {
		g.cfg.TestHookAfterReserve(txCtx)
	}
	ans, err := exec(txCtx)
	if err != nil {
		if rbErr := tx.Rollback(ctx); rbErr != nil {
			log.WarnContext(ctx, "idempotency: rollback failed", slog.Any("err", rbErr))
		}
		if errors.Is(err, errResponseTooLarge) {
			log.WarnContext(ctx, "idempotency: answer over the stored-response limit, rolled back",
				slog.Int64("limit", g.cfg.MaxResponseBytes))
		}
		return OutcomeRolledBack, nil, err
	}
	rec.Status = StatusCompleted
	rec.ResponseStatus = ans.status
	rec.ResponseHeader = g.storedHeader(ans.header)
	rec.ResponseBody = ans.body
	rec.CompletedAt = g.cfg.Now()
	rec.ExpiresAt = now.Add(g.cfg.Retention)
	if g.cfg.TestHookBeforeCommit != nil {
		g.cfg.TestHookBeforeCommit(txCtx)
	}
	// From here a failure leaves the outcome unknown to the gate: a store
	// may send the completion with the COMMIT, and a connection lost
	// during COMMIT does not say whether it happened. The handler has
	// answered: what it did commits with its answer even if the client
	// has gone (its request's context ended), and the client's resend
	// replays it, instead of the work being thrown away half-way through
	// the commit.
	ctx = context.WithoutCancel(ctx)
	err = tx.Complete(ctx, rec)
	if errors.Is(err, ErrTxAborted) {
		// A statement of the handler failed, and the handler answered
		// anyway. A final refusal (the natural "insert, catch the unique
		// violation, answer 409") is stored without the handler's writes:
		// back to the savepoint, which also ends the aborted state. A
		// success cannot be: its writes did not happen.
		if !savepoint || ans.status < 400 {
			log.WarnContext(ctx, "idempotency: the handler answered success after a statement failed; rolled back",
				slog.Int("status", ans.status))
			return OutcomeFailed, nil, err
		}
		if err := sp.RollbackToSavepoint(ctx); err != nil {
			log.WarnContext(ctx, "idempotency: rollback to the savepoint failed", slog.Any("err", err))
			return OutcomeFailed, nil, err
		}
		err = tx.Complete(ctx, rec)
	}
	if err != nil {
		return g.endFailed(ctx, log, "complete", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return g.endFailed(ctx, log, "commit", err)
	}
	if item != nil {
		item.executed = true
	}
	return OutcomeExecuted, ans, nil
}

// lookup answers (actor, key) from its committed record, if that settles
// it: the stored answer of a completed record with the same fingerprint,
// or OutcomeKeyReused for another fingerprint. ok is false when the key
// must be reserved (no live record, or one still processing), or when
// the read failed (the reservation then reads again, under its lock).
func (g *Gate) lookup(ctx context.Context, log *lazyLogger, actor, key, fp string) (Outcome, *answer, bool) {
	rec, err := g.cfg.Store.Get(ctx, actor, key)
	if err != nil {
		log.WarnContext(ctx, "idempotency: reading the record failed", slog.Any("err", err))
		return 0, nil, false
	}
	if rec == nil || rec.Expired(g.cfg.Now()) {
		return 0, nil, false
	}
	switch {
	case rec.Fingerprint != fp:
		log.InfoContext(ctx, "idempotency: key reused with another request")
		return OutcomeKeyReused, nil, true
	case rec.Status == StatusCompleted:
		log.DebugContext(ctx, "idempotency: replay")
		return OutcomeReplayed, &answer{rec.ResponseStatus, rec.ResponseHeader, rec.ResponseBody}, true
	}
	return 0, nil, false
}

// inFlight is the answer when another execution holds the key: it reads
// the record once more, since that execution may have committed since
// the first read, and answers OutcomeInFlight only if it has not.
func (g *Gate) inFlight(ctx context.Context, log *lazyLogger, actor, key, fp string) (Outcome, *answer, error) {
	if o, ans, ok := g.lookup(ctx, log, actor, key, fp); ok {
		return o, ans, nil
	}
	return OutcomeInFlight, nil, nil
}

// endFailed reports a failure to complete or commit after the handler
// ran. A transaction the handler ended, or one the database says it
// rolled back (ErrTxAborted), is OutcomeFailed: nothing committed. Any
// other failure (a connection lost during COMMIT) is OutcomeUnknown.
func (g *Gate) endFailed(ctx context.Context, log *lazyLogger, step string, err error) (Outcome, *answer, error) {
	g.warnEnd(ctx, log, step, err)
	if errors.Is(err, ErrTxEnded) || errors.Is(err, ErrTxAborted) {
		return OutcomeFailed, nil, err
	}
	return OutcomeUnknown, nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

func (g *Gate) warnEnd(ctx context.Context, log *lazyLogger, step string, err error) {
	if errors.Is(err, ErrTxEnded) {
		log.ErrorContext(ctx, "idempotency: the handler committed or rolled back the gate's transaction; "+
			"the key is held until its processing lease ends", slog.Duration("lease", g.cfg.ProcessingLease))
		return
	}
	log.WarnContext(ctx, "idempotency: "+step+" failed", slog.Any("err", err))
}

// Storable is the default Config.Stored. It reports whether a handler's
// answer with this status is final for its key and stored for replay:
// every answer but those that say the request was not authorised or not
// attempted (401, 403), or may be tried again as it is (408, 425, 429,
// 5xx). A business refusal (400, 404, 409 "username_taken", 422) is
// final: it is stored, and what the handler wrote before answering
// commits with it.
func Storable(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout,
		http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

// ambiguousJSON returns the error code and message for a body that, if
// it is JSON at all, cannot be fingerprinted faithfully: invalid UTF-8,
// lone surrogates and repeated member names each let two different
// requests look the same (or one request mean two things to two
// parsers), and nesting deeper than maxDepth would cost the
// fingerprint's walk (and the handler's decoder) unbounded time and
// stack. The check itself stops at maxDepth. A body that is not JSON is
// fingerprinted by its bytes and is not refused here.
func ambiguousJSON(body []byte, maxDepth int) (code, msg string) {
	err := jsonstrict.Check(body, maxDepth)
	var je *jsonstrict.Error
	if !errors.As(err, &je) {
		return "", ""
	}
	switch je.Kind {
	case jsonstrict.InvalidUTF8, jsonstrict.LoneSurrogate, jsonstrict.DuplicateName:
		return CodeBadRequest, "the request body is ambiguous JSON: " + je.Error()
	case jsonstrict.TooDeep:
		return CodeJSONTooDeep, "the request body is JSON " + je.Error()
	}
	return "", ""
}

func (g *Gate) writeInFlight(w http.ResponseWriter, r *http.Request) {
	g.setRetryAfter(w)
	g.cfg.WriteError(w, r, http.StatusConflict, CodeInFlight, "a request with this Idempotency-Key is still being processed")
}

// setRetryAfter sets Retry-After to Config.RetryAfter plus a jitter of
// up to as much again, in whole seconds rounded up, so that duplicates
// told to come back do not all come back together.
func (g *Gate) setRetryAfter(w http.ResponseWriter) {
	d := g.cfg.RetryAfter + time.Duration(g.cfg.Rand(int64(g.cfg.RetryAfter)+1))
	secs := int((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
}

// storedHeader is the part of the handler's header kept for replays:
// the headers named in Config.ReplayedHeaders.
func (g *Gate) storedHeader(h http.Header) http.Header {
	out := make(http.Header)
	for k, v := range h {
		if g.replayed[http.CanonicalHeaderKey(k)] {
			out[http.CanonicalHeaderKey(k)] = slices.Clone(v)
		}
	}
	return out
}

func writeAnswer(w http.ResponseWriter, a *answer, replayed bool) {
	dst := w.Header()
	for k, v := range a.header {
		dst[k] = append([]string(nil), v...)
	}
	dst.Del(HeaderReplayed)
	if replayed {
		dst.Set(HeaderReplayed, "true")
	}
	dst.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// parseKey returns the key from the Idempotency-Key header values. The
// key may be sent bare (as Stripe does) or as a structured-field string
// in double quotes (as the IETF draft does); both name the same key.
func parseKey(vals []string) (string, bool) {
	if len(vals) != 1 {
		return "", false
	}
	k := strings.TrimSpace(vals[0])
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > MaxKeyLength {
		return "", false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", false
		}
	}
	return k, true
}

// lazyLogger adds the operation and the key's short hash to a line, and
// builds them only when a line is logged.
type lazyLogger struct {
	base *slog.Logger
	op   string
	key  string
}

func (l *lazyLogger) log(ctx context.Context, level slog.Level, msg string, args ...any) {
	if !l.base.Enabled(ctx, level) {
		return
	}
	args = append(args, slog.String("operation", l.op), slog.String("key_hash", keyHash(l.key)))
	l.base.Log(ctx, level, msg, args...)
}

func (l *lazyLogger) DebugContext(ctx context.Context, msg string, args ...any) {
	l.log(ctx, slog.LevelDebug, msg, args...)
}

func (l *lazyLogger) InfoContext(ctx context.Context, msg string, args ...any) {
	l.log(ctx, slog.LevelInfo, msg, args...)
}

func (l *lazyLogger) WarnContext(ctx context.Context, msg string, args ...any) {
	l.log(ctx, slog.LevelWarn, msg, args...)
}

func (l *lazyLogger) ErrorContext(ctx context.Context, msg string, args ...any) {
	l.log(ctx, slog.LevelError, msg, args...)
}
