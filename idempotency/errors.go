package idempotency

import "errors"

// Configuration errors, returned by New and NewSweeper.
var (
	// ErrNoStore means Config.Store is nil.
	ErrNoStore = errors.New("idempotency: no store configured")
	// ErrNoActor means Config.Actor is nil; Gate.Wrap panics with it.
	ErrNoActor = errors.New("idempotency: no actor function configured")
)

// Store errors.
var (
	// ErrInFlight is returned by Tx.Reserve when another request holds the
	// same (actor, key) and did not finish within the store's wait. The
	// gate answers 409 with Retry-After.
	ErrInFlight = errors.New("idempotency: request with this key is in flight")
	// ErrNotReserved is returned by Tx.Complete when the transaction did
	// not reserve the record it is asked to complete.
	ErrNotReserved = errors.New("idempotency: record not reserved in this transaction")
	// ErrTxDone is returned when a finished transaction is used again.
	ErrTxDone = errors.New("idempotency: transaction already committed or rolled back")
	// ErrTxEnded is returned by Tx.Complete and Tx.Commit when the
	// transaction was committed or rolled back behind the gate's back
	// (by the handler). The gate answers 500; if the handler committed,
	// the key stays held until Config.ProcessingLease ends.
	ErrTxEnded = errors.New("idempotency: the transaction was ended outside the gate")
	// ErrOutcomeUnknown is wrapped by the error of Do when completing or
	// committing failed after the request ran (a connection lost during
	// COMMIT): it may or may not have committed. The gate answers 503
	// outcome_unknown; a retry with the same key replays or runs.
	ErrOutcomeUnknown = errors.New("idempotency: completing or committing failed; the outcome is unknown")
	// ErrTxAborted is returned (wrapped) by Tx.Complete, Tx.Commit and
	// TxGroup.Commit when a statement failed and the store's transaction
	// is aborted (PostgreSQL's 25P02) or was rolled back by the database:
	// nothing of it can commit, and nothing did. On a SavepointTx the gate
	// then rolls back to the savepoint it took after the reservation and
	// stores the handler's answer if it is a final refusal (4xx).
	ErrTxAborted = errors.New("idempotency: a statement failed and the transaction is aborted")
	// ErrGroupBroken is returned by TxGroup.Begin and Commit of a group
	// that is Broken.
	ErrGroupBroken = errors.New("idempotency: the group transaction can only be rolled back")
)

// Errors of Do.
var (
	// ErrKeyReused is returned by Do when the key was used with another
	// fingerprint.
	ErrKeyReused = errors.New("idempotency: key already used with another request")
)

// Error codes the gate writes in {"error":{"code":...}} bodies. Clients
// switch on them; they never change.
const (
	CodeKeyMissing   = "idempotency_key_missing" // 400: unsafe method without Idempotency-Key
	CodeKeyInvalid   = "idempotency_key_invalid" // 400: key empty after unquoting or longer than MaxKeyLength
	CodeKeyReused    = "idempotency_key_reused"  // 422: same key, other fingerprint
	CodeInFlight     = "idempotency_in_flight"   // 409: same key still being processed; see Retry-After
	CodeTooLarge     = "too_large"               // 413: body over Config.MaxBodyBytes
	CodeUnauthorized = "unauthorized"            // 401: Config.Actor failed
	CodeInternal     = "internal"                // 500: the store failed, or the handler's transaction was aborted; nothing was done
	CodeBadRequest   = "bad_request"             // 400: the body could not be read, or is ambiguous JSON (invalid UTF-8, lone surrogate, repeated name)
	// 400: the JSON body is nested deeper than Config.MaxJSONDepth.
	CodeJSONTooDeep = "json_too_deep"
	// 503: the store's commit failed (the connection was lost during
	// COMMIT, say): the request may or may not have taken effect. A
	// retry with the same Idempotency-Key replays the answer if it did
	// and runs the request if it did not.
	CodeOutcomeUnknown = "outcome_unknown"
	// 500: the handler's answer is over Config.MaxResponseBytes; it was
	// rolled back, so nothing was done.
	CodeResponseTooLarge = "response_too_large"
	// 424: a batch operation chained after an earlier one (its "after")
	// was not run: that one was not applied, or not as sent
	// (BatchConfig.Chain). Nothing was done or stored for its key: send
	// it again once the earlier one is settled.
	CodeDependencyFailed = "dependency_failed"
)
