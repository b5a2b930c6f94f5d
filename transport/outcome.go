package transport

import (
	"encoding/json"
	"strconv"
	"time"
)

// A Decision is what the daemon should do with an operation after one
// Send.
type Decision int

const (
	// Done: the server holds the operation's effect (2xx, replayed or
	// not, or a DELETE answered 404). Reconcile: server id onto the
	// entity, entity synced, operation done. Safe to redo.
	Done Decision = iota + 1

	// Retry: the operation may not have reached the server, or the server
	// asked to come back later. Schedule it with Policy.Next; RetryAfter
	// is the server's floor when it gave one.
	Retry

	// RefreshSession: the token was refused (401) or missing. Pause the
	// account and resend once a new token arrives; this is not an attempt
	// that should count towards giving up.
	RefreshSession

	// Permanent: resending the same request cannot succeed (403, 404 on an
	// update, 422 idempotency_key_reused, a route or response that does
	// not fit). The operation fails; the user or operator reviews it.
	Permanent

	// NeedsUserAction: the server refused the data itself (400, 422
	// validation, other 4xx). The operation fails; the user fixes the
	// entity (the daemon then sends it again under a new key, since the
	// server answers the old one with its refusal) or discards it.
	NeedsUserAction

	// Conflict: the server holds a newer version of the entity than the
	// one the change was made on and its policy refused the write (409
	// version_conflict), or an update found the record deleted on the
	// server (410). Outcome.Current is what the server holds. The
	// entity's sync state becomes conflict; the user resolves it.
	Conflict
)

var decisionNames = [...]string{
	Done:            "done",
	Retry:           "retry",
	RefreshSession:  "refresh_session",
	Permanent:       "permanent",
	NeedsUserAction: "needs_user_action",
	Conflict:        "conflict",
}

// String returns the decision's stable lower-case name, e.g. "retry".
func (d Decision) String() string {
	if d > 0 && int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "Decision(" + strconv.Itoa(int(d)) + ")"
}

// Stable outcome codes (Outcome.Code). They are a closed set, fit for a
// metric label and for an operation's last_error_code. The server's own
// error code, which is not a closed set, is in Outcome.ServerCode.
const (
	// Retry.
	CodeNetwork        = "network"         // dial, write or read failed; connection reset or closed
	CodeTimeout        = "timeout"         // Config.Timeout or a net timeout ended the exchange
	CodeCanceled       = "canceled"        // the caller's context ended (daemon stopping)
	CodeRequestTimeout = "request_timeout" // 408
	CodeRateLimited    = "rate_limited"    // 429
	CodeUnavailable    = "unavailable"     // 503
	CodeServerError    = "server_error"    // other 5xx
	CodeInFlight       = "in_flight"       // 409: the same key is still being processed
	// CodeDependencyFailed: a chained request (Request.Chained) was not
	// run because the one before it was not applied as sent (the
	// remote's 424), or was not sent: nothing of it was done.
	CodeDependencyFailed = "dependency_failed"
	CodeTLS              = "tls" // the TLS handshake failed: an untrusted or mismatched certificate, or an https URL for a plain-HTTP server; nothing was sent

	// RefreshSession.
	CodeUnauthorized = "unauthorized"  // 401
	CodeMissingToken = "missing_token" // Request.Token empty; nothing sent
	CodeInvalidToken = "invalid_token" // Request.Token cannot be sent as a header (ValidateToken); nothing sent

	// Permanent.
	CodeForbidden        = "forbidden"          // 403
	CodeNotFound         = "not_found"          // 404 on a create, or on an update without a server id (Done on delete)
	CodeGone             = "gone"               // 410 on create or update: deleted on the server (Done on delete)
	CodePayloadConflict  = "payload_conflict"   // 422 idempotency_key_reused
	CodeMissingServerID  = "missing_server_id"  // route needs {serverId}, Request has none; nothing sent
	CodeInvalidRequest   = "invalid_request"    // malformed Request; nothing sent
	CodeInvalidResponse  = "invalid_response"   // 2xx create without a server id
	CodeResponseTooLarge = "response_too_large" // 2xx create whose body is over Config.MaxResponseBytes
	CodeUnexpectedStatus = "unexpected_status"  // 1xx or 3xx (redirects are not followed)

	// NeedsUserAction.
	CodeValidation = "validation" // 400, 422 other than idempotency_key_reused
	CodeRejected   = "rejected"   // any other 4xx (405, 413, 415, 409 with a domain code, ...)

	// Conflict.
	CodeVersionConflict = "version_conflict"  // 409 version_conflict: the server holds a newer version
	CodeDeletedOnServer = "deleted_on_server" // 410 or 404 on an update of a record the server had: another device deleted it
)

// Server error codes with a meaning for the protocol.
const (
	// ServerCodeKeyReused is the 422 code of a key reused with another
	// payload.
	ServerCodeKeyReused = "idempotency_key_reused"
	// ServerCodeVersionConflict is the 409 code of a write refused
	// because the server holds a newer version than its baseVersion.
	ServerCodeVersionConflict = "version_conflict"
)

// Current is the server's record in a conflict answer.
type Current struct {
	// ID is the record's server id, when the answer names it (a create's
	// conflict: the record another device made under the same client id).
	ID      string
	Version int64
	Deleted bool
	Data    json.RawMessage // absent when deleted
	// Paths are the fields in conflict (JSON pointers), from a merging
	// server's answer ("paths"); empty: the whole record.
	Paths []string
	// Base is the record's data at the version the change was made on,
	// from the answer's "base", when the server still keeps it.
	Base json.RawMessage
}

// serverInFlightCodes are error codes a 409 may carry for "the same key is
// still being processed". A 409 without a code, or with a Retry-After, is
// taken as in flight too (IETF Idempotency-Key draft, Stripe).
var serverInFlightCodes = map[string]bool{
	"idempotency_in_flight":       true, // the reference server (idempotency.CodeInFlight)
	"idempotency_key_in_flight":   true,
	"idempotency_key_in_use":      true,
	"idempotency_key_in_progress": true,
	"in_flight":                   true,
	"in_progress":                 true,
	"request_in_progress":         true,
	"processing":                  true,
}

// Outcome is the result of one Send, classified.
type Outcome struct {
	// Decision is what to do next. Always set.
	Decision Decision

	// Code is a stable code (the Code* constants); empty for a plain
	// success. A DELETE answered 404 is Done with CodeNotFound.
	Code string

	// Status is the HTTP status, 0 if no response was read.
	Status int

	// ServerID is the server's id of the entity: read from a create's
	// response (Routes.IDField), or Request.ServerID for update and
	// delete. Set only when Decision is Done.
	ServerID string

	// OtherData is set for a create answered 200, the answer for a
	// record the server already held under the clientId (a new one is
	// 201), when the record's "data" lacks a member the request sent or
	// holds another value for it: the server keeps other data than the
	// operation's. ServerPayloadVersion is then the record's
	// "payloadVersion", if it is a whole number. An answer without a
	// "data" object says nothing, and OtherData stays false.
	OtherData            bool
	ServerPayloadVersion int64

	// ServerVersion is the record's version after the write, from the
	// answer's "version" (0 when it carries none). The daemon stores it,
	// and skips the change when the feed brings it back.
	ServerVersion int64

	// Data is the record's data after a create or update, from the
	// answer's "data" object (nil when it carries none): a merging server
	// answers the sent fields merged with what other devices wrote.
	Data json.RawMessage

	// Current is the server's record when Decision is Conflict (its
	// version and data from a 409's "current"; deleted for a 410).
	Current *Current

	// Replayed is true when the server answered with
	// "Idempotent-Replayed: true": the answer of an earlier attempt.
	Replayed bool

	// RetryAfter is the server's Retry-After, as a duration from when the
	// response was read; 0 if it sent none (or a date in the past).
	RetryAfter time.Duration

	// ServerCode and Message are the server's error code and message from
	// an {"error":{"code","message"}} body; Message may instead describe
	// a local failure. Message is cut to 1 KiB.
	ServerCode string
	Message    string

	// Body is the response body, at most Config.MaxResponseBytes of it.
	Body []byte

	// Truncated is true when the body was longer than
	// Config.MaxResponseBytes: Body holds only its start. A 2xx create
	// then is Permanent with CodeResponseTooLarge; other outcomes are
	// decided by the status as usual.
	Truncated bool

	// Err describes every outcome that is not Done; it wraps one of the
	// package's sentinel errors or the net/http or context error.
	Err error

	// Method and URL are the request's, once it was built (for messages:
	// the URL holds no credential). Location is a 3xx answer's Location
	// header.
	Method, URL, Location string

	// Sends counts how many times net/http wrote the whole request onto a
	// connection during this Send (httptrace WroteRequest without an
	// error; written may still mean only buffered by the kernel). 0 means
	// the server cannot have seen it whole (e.g. dial refused, or nothing
	// was sent). More than 1 means net/http resent it
	// by itself on a new connection after a reused one died before any
	// answer, which it does for requests carrying an Idempotency-Key. The
	// server's idempotency record makes that safe.
	Sends int
}
