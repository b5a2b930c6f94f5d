package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultInFlightWait = 2 * time.Second
	DefaultRetryAfter   = time.Second
	// 1 MiB of data (syncd's default entity data limit) plus room for
	// the request's envelope.
	DefaultMaxBodyBytes = 1<<20 + 64<<10
	// MaxKeyLength is the longest Idempotency-Key accepted, in bytes.
	MaxKeyLength = 255
)

// Header names.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// Outcome is what the gate did with one request; Config.OnOutcome
// receives it, for metrics.
type Outcome int

const (
	OutcomeExecuted   Outcome = iota // the handler ran and its response was stored
	OutcomeReplayed                  // a stored response was replayed
	OutcomeKeyReused                 // 422: same key, other fingerprint
	OutcomeInFlight                  // 409: same key still in flight
	OutcomeKeyMissing                // 400: no (valid) key
	OutcomeRolledBack                // the handler answered 5xx or a retryable 4xx: nothing stored
	OutcomeFailed                    // the store failed: 500, nothing stored
)

var outcomeNames = [...]string{"executed", "replayed", "key_reused", "in_flight", "key_missing", "rolled_back", "failed"}

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
	Actor func(*http.Request) (string, error)
	// Operation names the operation type of a request, stored with the
	// record and passed to OnOutcome. Default: r.Pattern when the gate
	// wraps a handler registered on a ServeMux, else "METHOD path".
	Operation func(*http.Request) string
	// Route is the route that goes into the fingerprint. Default:
	// r.URL.Path (so the same body sent to another resource is another
	// request).
	Route func(*http.Request) string
	// ExcludedFields are top-level body fields left out of the
	// fingerprint (attempt metadata). nil means DefaultExcludedFields; an
	// empty non-nil slice excludes nothing.
	ExcludedFields []string
	// Retention is how long a record is kept (DefaultRetention).
	Retention time.Duration
	// InFlightWait is how long a request waits for another request with
	// the same (actor, key) in this process before answering 409.
	// Stores that wait across processes use their own setting
	// (pgstore.Config.LockTimeout). Negative: do not wait.
	InFlightWait time.Duration
	// RetryAfter is sent with 409 in-flight answers (DefaultRetryAfter).
	RetryAfter time.Duration
	// MaxBodyBytes limits the request body read for the fingerprint
	// (DefaultMaxBodyBytes); a larger body answers 413.
	MaxBodyBytes int64
	// Now is the clock for record times and expiry (time.Now).
	Now func() time.Time
	// Logger gets debug lines for replays and warnings for failures. Keys
	// are logged only as a short hash. Default: discard.
	Logger *slog.Logger
	// OnOutcome, if set, is called once per gated request (for metrics).
	OnOutcome func(r *http.Request, operation string, o Outcome)
	// WriteError writes an error answer. Default: WriteError, which writes
	// {"error":{"code":...,"message":...}}.
	WriteError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	// TestHookAfterReserve, if set, runs after a new reservation and
	// before the handler; its context carries the transaction
	// (TxFromContext). Tests use it to crash, stall or break a request
	// exactly there.
	TestHookAfterReserve func(ctx context.Context)
}

// Gate is the idempotency middleware. Requests with a safe method (GET,
// HEAD, OPTIONS, TRACE) pass through untouched. Every other request must
// carry an Idempotency-Key; the gate then, in one store transaction,
// reserves (actor, key), runs the handler with the transaction in its
// context, stores the response and commits, and only then sends the
// response. See the package documentation for the answers it gives.
type Gate struct {
	cfg      Config
	exclude  []string
	inflight inflight
}

// New returns a Gate for cfg.
func New(cfg Config) (*Gate, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	if cfg.Actor == nil {
		return nil, ErrNoActor
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.InFlightWait == 0 {
		cfg.InFlightWait = DefaultInFlightWait
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
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
		cfg.Route = func(r *http.Request) string { return r.URL.Path }
	}
	g := &Gate{cfg: cfg, exclude: cfg.ExcludedFields}
	if g.exclude == nil {
		g.exclude = DefaultExcludedFields
	}
	g.inflight.m = make(map[string]chan struct{})
	return g, nil
}

func defaultOperation(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.Method + " " + r.URL.Path
}

// Retention returns the configured record retention.
func (g *Gate) Retention() time.Duration { return g.cfg.Retention }

// Wrap returns next behind the gate.
func (g *Gate) Wrap(next http.Handler) http.Handler {
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
		g.cfg.WriteError(w, r, http.StatusUnauthorized, CodeUnauthorized, "no authenticated actor")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, g.cfg.MaxBodyBytes+1))
	if err != nil {
		g.cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, "reading the request body failed")
		return
	}
	if int64(len(body)) > g.cfg.MaxBodyBytes {
		g.cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge,
			fmt.Sprintf("the request body is larger than %d bytes", g.cfg.MaxBodyBytes))
		return
	}
	fp := Fingerprint(r.Method, g.cfg.Route(r), body, g.exclude)
	log := &lazyLogger{base: g.cfg.Logger, op: op, key: key}

	// Requests with the same (actor, key) in this process queue here, so
	// a duplicate waits for the first instead of holding a store
	// connection or the bbolt writer lock.
	release, ok := g.inflight.acquire(ctx, actor+"\x00"+key, g.cfg.InFlightWait)
	if !ok {
		outcome(OutcomeInFlight)
		g.writeInFlight(w, r)
		return
	}
	defer release()

	tx, err := g.cfg.Store.Begin(ctx)
	if err != nil {
		log.WarnContext(ctx, "idempotency: begin failed", slog.Any("err", err))
		outcome(OutcomeFailed)
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "the idempotency store is unavailable")
		return
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
		ExpiresAt:   now.Add(g.cfg.Retention),
	}
	existing, err := tx.Reserve(ctx, rec, now)
	switch {
	case errors.Is(err, ErrInFlight):
		outcome(OutcomeInFlight)
		g.writeInFlight(w, r)
		return
	case err != nil:
		log.WarnContext(ctx, "idempotency: reserve failed", slog.Any("err", err))
		outcome(OutcomeFailed)
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "the idempotency store failed")
		return
	case existing != nil:
		_ = tx.Rollback(ctx)
		switch {
		case existing.Fingerprint != fp:
			log.InfoContext(ctx, "idempotency: key reused with another request")
			outcome(OutcomeKeyReused)
			g.cfg.WriteError(w, r, http.StatusUnprocessableEntity, CodeKeyReused,
				"this Idempotency-Key was already used with a different request")
		case existing.Status != StatusCompleted:
			outcome(OutcomeInFlight)
			g.writeInFlight(w, r)
		default:
			log.DebugContext(ctx, "idempotency: replay")
			outcome(OutcomeReplayed)
			writeStored(w, existing.ResponseStatus, existing.ResponseHeader, existing.ResponseBody, true)
		}
		return
	}

	txCtx := ContextWithTx(ctx, tx)
	if g.cfg.TestHookAfterReserve != nil {
		g.cfg.TestHookAfterReserve(txCtx)
	}

	rr := newRecorder()
	r2 := r.WithContext(txCtx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	next.ServeHTTP(rr, r2)

	if !Storable(rr.status) {
		if err := tx.Rollback(ctx); err != nil {
			log.WarnContext(ctx, "idempotency: rollback failed", slog.Any("err", err))
		}
		outcome(OutcomeRolledBack)
		writeStored(w, rr.status, rr.header, rr.body.Bytes(), false)
		return
	}
	rec.Status = StatusCompleted
	rec.ResponseStatus = rr.status
	rec.ResponseHeader = storedHeader(rr.header)
	rec.ResponseBody = rr.body.Bytes()
	rec.CompletedAt = g.cfg.Now()
	if err := tx.Complete(ctx, rec); err != nil {
		log.WarnContext(ctx, "idempotency: complete failed", slog.Any("err", err))
		outcome(OutcomeFailed)
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "storing the response failed")
		return
	}
	if err := tx.Commit(ctx); err != nil {
		log.WarnContext(ctx, "idempotency: commit failed", slog.Any("err", err))
		outcome(OutcomeFailed)
		g.cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "committing the request failed")
		return
	}
	outcome(OutcomeExecuted)
	writeStored(w, rr.status, rr.header, rr.body.Bytes(), false)
}

// Storable reports whether a handler's answer with this status is final
// for its key and stored for replay. 5xx answers and the retryable 4xx
// ones (408, 409, 425, 429) are not: the gate rolls the transaction back,
// domain writes included, so a retry with the same key runs again.
func Storable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

func (g *Gate) writeInFlight(w http.ResponseWriter, r *http.Request) {
	secs := int((g.cfg.RetryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	g.cfg.WriteError(w, r, http.StatusConflict, CodeInFlight, "a request with this Idempotency-Key is still being processed")
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

// storedHeader is the part of the handler's header kept for replays.
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	out.Del("Set-Cookie")
	out.Del("Date")
	out.Del(HeaderReplayed)
	return out
}

func writeStored(w http.ResponseWriter, status int, h http.Header, body []byte, replayed bool) {
	dst := w.Header()
	for k, v := range h {
		dst[k] = append([]string(nil), v...)
	}
	if replayed {
		dst.Set(HeaderReplayed, "true")
	}
	dst.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteError writes {"error":{"code":code,"message":message}} with status.
// It is the default Config.WriteError.
func WriteError(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	type errBody struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Error errBody `json:"error"`
	}{errBody{code, message}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
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
