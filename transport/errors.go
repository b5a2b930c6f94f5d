package transport

import "errors"

// Errors of New.
var (
	// ErrInvalidConfig is returned by New, wrapped with the field that is
	// wrong, when the Config cannot be used.
	ErrInvalidConfig = errors.New("transport: invalid config")
)

// Errors carried in Outcome.Err when Send returns without sending.
var (
	// ErrInvalidRequest means the Request itself is malformed (no
	// operation id, unknown op, no entity type or id, data that is not
	// JSON). Nothing was sent; the outcome is Permanent.
	ErrInvalidRequest = errors.New("transport: invalid request")

	// ErrMissingServerID means an update or delete whose route needs the
	// server id ({serverId}) has none: its create has not been reconciled.
	// Nothing was sent; the outcome is Permanent with code
	// CodeMissingServerID.
	ErrMissingServerID = errors.New("transport: missing server id")

	// ErrMissingToken means the Request has no bearer token. Nothing was
	// sent; the outcome is RefreshSession.
	ErrMissingToken = errors.New("transport: missing access token")

	// ErrInvalidToken means the Request's bearer token cannot be sent
	// (ValidateToken): a control character, a space, a byte outside
	// ASCII, or too long. Nothing was sent; the outcome is
	// RefreshSession with CodeInvalidToken, since a new token, not
	// another attempt, is what helps.
	ErrInvalidToken = errors.New("transport: access token cannot be sent")
)

// Errors carried in Outcome.Err after a send.
var (
	// ErrTimeout means the per-request timeout (Config.Timeout) ended the
	// exchange before a complete response was read.
	ErrTimeout = errors.New("transport: request timed out")

	// ErrInvalidResponse means the server answered a create with 2xx but
	// the body holds no server id in the configured field.
	ErrInvalidResponse = errors.New("transport: invalid response")

	// ErrResponseTooLarge means the server answered a create with 2xx and
	// a body longer than Config.MaxResponseBytes, so the server id was
	// not read. The server applied the create; raise the limit.
	ErrResponseTooLarge = errors.New("transport: response too large")

	// ErrStatus is wrapped by every outcome that a non-2xx status decided,
	// except a Done (a delete answered 404 or 410); the
	// status, code and message are in the Outcome.
	ErrStatus = errors.New("transport: unsuccessful status")
)
