package localapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	"github.com/syncd/syncd/queue"
)

// Errors returned by the helpers that set up a server.
var (
	// ErrNotLoopback is returned by CheckListenAddr for an address that is
	// not a loopback address or "localhost".
	ErrNotLoopback = errors.New("localapi: listen address is not loopback")
	// ErrTokenFileMode is returned by LoadOrCreateToken when the token
	// file can be read by users other than its owner.
	ErrTokenFileMode = errors.New("localapi: API token file is readable by other users")
	// ErrTokenFileInvalid is returned by LoadOrCreateToken when the token
	// file does not hold a token.
	ErrTokenFileInvalid = errors.New("localapi: API token file is malformed")
	// ErrUnixSocketUnsupported is returned by ListenUnix and
	// CheckSocketPath on an OS without the socket listener (Windows).
	ErrUnixSocketUnsupported = errors.New("localapi: no Unix socket listener")
	// ErrSocketPath is returned by ListenUnix and CheckSocketPath for a
	// socket path that cannot be used: too long, a file that is not a
	// socket, or a socket another process listens on.
	ErrSocketPath = errors.New("localapi: unusable Unix socket path")
	// ErrSocketDirMode is returned by ListenUnix when the socket's
	// directory is open to other users (group or other permission bits)
	// or belongs to another user.
	ErrSocketDirMode = errors.New("localapi: Unix socket directory is not private")
)

// The error codes of the API: the "code" of {"error":{"code","message"}}.
// They are stable; clients switch on them.
const (
	CodeUnauthorized         = "unauthorized"           // 401: missing or wrong bearer token
	CodeForbiddenHost        = "forbidden_host"         // 403: Host is not a loopback name
	CodeForbiddenOrigin      = "forbidden_origin"       // 403: Origin not on the allowlist (under /ui/: not the status page's own, or missing on a write)
	CodeSessionRequired      = "session_required"       // 401: a /ui/ route without a live status page session
	CodeCSRFFailed           = "csrf_failed"            // 403: a status page write without its session's X-CSRF-Token
	CodeTooManyLinks         = "too_many_links"         // 429: MaxUILinks sign-in links are outstanding
	CodeUIUnreachable        = "ui_unreachable"         // 409: a sign-in link, but no loopback TCP listener serves the status page
	CodeAdminRequired        = "admin_required"         // 403: the route needs the admin token; an app token was sent
	CodeReadOnly             = "read_only"              // 403: a write with a read-only app token
	CodeTypeNotGranted       = "type_not_granted"       // 403: an entity type the app token is not granted
	CodeAccountNotGranted    = "account_not_granted"    // 403: an app token asked for an account that is not signed in
	CodeNotFound             = "not_found"              // 404: no such route, entity or operation
	CodeUnknownEntityType    = "unknown_entity_type"    // 404: entity type not configured
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeRequestTimeout       = "request_timeout"        // 408: the body did not arrive within Config.BodyTimeout
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: body without Content-Type application/json
	CodeBodyTooLarge         = "body_too_large"         // 413
	CodeInvalidJSON          = "invalid_json"           // 400: body is not one JSON object, or JSON readers would take in different ways
	CodeInvalidRequest       = "invalid_request"        // 400: a field, parameter or header is wrong
	CodeNoSession            = "no_session"             // 409: the request needs a signed-in account
	CodeEntityExists         = "entity_exists"          // 409: create of an id that is taken
	CodeEntityStale          = "entity_stale"           // 409: update of an entity whose newer server version is over this device's data limit
	CodeIllegalTransition    = "illegal_transition"     // 409: retry/discard of an operation not failed
	CodeNotPurgeable         = "not_purgeable"          // 409: purge refused, unsynced operations
	CodePurgeInProgress      = "purge_in_progress"      // 409: sign-in of an account whose purge has not finished
	CodeNoConflict           = "no_conflict"            // 409: resolve of an entity that is not in conflict
	CodeAppExists            = "app_exists"             // 409: an app of that name is registered already
	CodeKeyReused            = "idempotency_key_reused" // 422: Idempotency-Key used for another request
	CodeUpgradeRequired      = "upgrade_required"       // 426: GET /v1/events without a WebSocket handshake
	CodeInternal             = "internal"               // 500
	CodeShuttingDown         = "shutting_down"          // 503: syncd is stopping; no new event streams
	CodeTooManySubscribers   = "too_many_subscribers"   // 503: the event stream's subscriber limit is reached
	CodeStorageFull          = "storage_full"           // 507: no room for the write (a full disk, or the queue's size limit); nothing written
	CodeRefreshUnsupported   = "refresh_unsupported"    // 501: refresh, but the remote cannot read one record
	CodeRemoteUnavailable    = "remote_unavailable"     // 503: refresh, but reading the record from the remote failed; nothing changed
	CodeVersionsUnsupported  = "versions_unsupported"   // 501: versions, but the remote keeps no history of the record
	CodeNotOnServer          = "not_on_server"          // 409: versions of an entity whose create the server has not answered yet
)

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError writes every error answer of the API.
func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

// writeJSON writes v as the JSON answer with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	// No HTML escaping: answers are application/json with nosniff and a
	// default-src 'none' policy, and read by people with curl.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	b := []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}` + "\n")
	if err := enc.Encode(v); err == nil {
		b = buf.Bytes()
	} else {
		status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// apiError is an error a handler already classified.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(code, message string) *apiError {
	return &apiError{http.StatusBadRequest, code, message}
}

// classify maps an error from a handler, the queue or the daemon to its
// status and code. Unknown errors are internal.
func classify(err error) (status int, code string) {
	var ae *apiError
	var mbe *http.MaxBytesError
	var je *jsonstrict.Error
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.code
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, CodeBodyTooLarge
	case errors.As(err, &je):
		// Entity data the queue refused as JSON.
		return http.StatusBadRequest, CodeInvalidJSON
	case errors.Is(err, queue.ErrInvalidWrite),
		errors.Is(err, daemon.ErrInvalidSession),
		errors.Is(err, daemon.ErrInvalidPolicy):
		return http.StatusBadRequest, CodeInvalidRequest
	case errors.Is(err, queue.ErrEntityNotFound), errors.Is(err, queue.ErrOperationNotFound), errors.Is(err, queue.ErrAppNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, queue.ErrInvalidApp):
		return http.StatusBadRequest, CodeInvalidRequest
	case errors.Is(err, errTooManyLinks):
		return http.StatusTooManyRequests, CodeTooManyLinks
	case errors.Is(err, queue.ErrAppExists):
		return http.StatusConflict, CodeAppExists
	case errors.Is(err, queue.ErrEntityExists):
		return http.StatusConflict, CodeEntityExists
	case errors.Is(err, queue.ErrEntityStale):
		return http.StatusConflict, CodeEntityStale
	case errors.Is(err, queue.ErrKeyReused):
		return http.StatusUnprocessableEntity, CodeKeyReused
	case errors.Is(err, queue.ErrIllegalTransition):
		return http.StatusConflict, CodeIllegalTransition
	case errors.Is(err, queue.ErrNotPurgeable):
		return http.StatusConflict, CodeNotPurgeable
	case errors.Is(err, queue.ErrPurging):
		return http.StatusConflict, CodePurgeInProgress
	case errors.Is(err, queue.ErrNoConflict):
		return http.StatusConflict, CodeNoConflict
	case errors.Is(err, daemon.ErrNoSession):
		return http.StatusConflict, CodeNoSession
	case errors.Is(err, queue.ErrStorageFull):
		return http.StatusInsufficientStorage, CodeStorageFull
	case errors.Is(err, daemon.ErrTooManySubscribers):
		return http.StatusServiceUnavailable, CodeTooManySubscribers
	case errors.Is(err, daemon.ErrBusClosed):
		return http.StatusServiceUnavailable, CodeShuttingDown
	case errors.Is(err, daemon.ErrNoRecordRead):
		return http.StatusNotImplemented, CodeRefreshUnsupported
	case errors.Is(err, daemon.ErrNoVersions):
		return http.StatusNotImplemented, CodeVersionsUnsupported
	case errors.Is(err, daemon.ErrNotOnServer):
		return http.StatusConflict, CodeNotOnServer
	case errors.Is(err, daemon.ErrRemote):
		return http.StatusServiceUnavailable, CodeRemoteUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}

// msgStorageFull answers a write that found no room. The error's own
// text (which may name the data file) goes to the log.
const msgStorageFull = "storage full: there is no room to store the write (the disk is full, or the queue reached its size limit, maxQueueBytes); nothing was written. Writes work again by themselves once there is room: free disk space, or let the queue drain. See syncd status."

// msgShuttingDown answers what syncd refuses while it stops.
const msgShuttingDown = "syncd is shutting down; try again once it is back"

// fail writes err as the error answer. Internal errors are logged at
// ERROR and answered with a generic message: their text may name files
// or state that is none of the client's business. The 5xx answers syncd
// gives on purpose (503 too_many_subscribers and shutting_down, 507
// storage_full) have their own codes and messages, and are not internal
// errors: storage_full is logged at WARN (at most once a minute), the
// others not at all.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := s.describe(r, err)
	writeError(w, status, code, msg)
}

// describe is the status, code and message of err's answer; it logs what
// fail's doc says is logged.
func (s *Server) describe(r *http.Request, err error) (status int, code, msg string) {
	status, code = classify(err)
	msg = err.Error()
	var ae *apiError
	if errors.As(err, &ae) {
		msg = ae.message
	}
	switch code {
	case CodeBodyTooLarge:
		var mbe *http.MaxBytesError
		limit := s.maxBody
		if errors.As(err, &mbe) {
			limit = mbe.Limit
		}
		msg = "request body is larger than " + strconv.FormatInt(limit, 10) + " bytes"
	case CodeStorageFull:
		s.storageFull.log(s.logger, err)
		msg = msgStorageFull
	case CodeShuttingDown:
		if ae == nil {
			msg = msgShuttingDown
		}
	case CodeInternal:
		s.logger.Error("localapi: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; see the daemon's log"
	}
	return status, code, msg
}

// rateLog logs a recurring condition at most once a minute, with how
// many times it happened since the last line.
type rateLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

func (l *rateLog) log(logger *slog.Logger, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < time.Minute {
		l.missed++
		return
	}
	logger.Warn("localapi: a write found no room; it was refused with 507 storage_full", "err", err, "refusedSinceLastLine", l.missed)
	l.last, l.missed = now, 0
}
