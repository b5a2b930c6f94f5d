// Package idempotency is the server half of syncd's delivery contract, as
// a library any Go HTTP backend can mount: a Gate that makes POST, PATCH,
// PUT and DELETE handlers safe to retry with an Idempotency-Key, after
// the IETF Idempotency-Key header draft and Stripe.
//
// It owns the gate (reserve, replay, conflict, in flight), the request
// fingerprint, the Store interface with its record lifecycle
// (processing, completed, expired) and the expiry Sweeper. The stores
// live in subpackages: boltstore (embedded, one bbolt file) and pgstore
// (PostgreSQL, for many server replicas); idempotencytest is the
// conformance suite a Store must pass. It does not know about the syncd
// daemon, its queue, authentication (the mounting server supplies
// Config.Actor) or any domain: the handler behind the gate does the
// domain write.
//
// # What the gate answers
//
// Safe methods (GET, HEAD, OPTIONS, TRACE) pass through. For the others:
//
//   - no Idempotency-Key: 400 idempotency_key_missing (a malformed one:
//     400 idempotency_key_invalid);
//   - a new (actor, key): the handler runs, and its response is stored;
//   - the same (actor, key) and the same fingerprint again: the stored
//     status, headers and body, with Idempotent-Replayed: true;
//   - the same (actor, key) with another fingerprint: 422
//     idempotency_key_reused, and the handler does not run;
//   - the same (actor, key) while the first request is still running:
//     the duplicate waits for it and then replays its answer; if it waits
//     longer than Config.InFlightWait (in this process) or the store's
//     own limit (pgstore.Config.LockTimeout, across replicas), 409
//     idempotency_in_flight with Retry-After.
//
// Errors are {"error":{"code":"...","message":"..."}} (Config.WriteError
// may write another shape). A handler's answer is final for its key and
// stored unless it is 5xx or a retryable 4xx (408, 409, 425, 429): then
// the transaction is rolled back, domain writes included, and a retry
// with the same key runs the handler again.
//
// # One transaction
//
// The reservation, the handler's domain write and the stored response
// commit in ONE store transaction, and the response reaches the client
// only after that commit. The handler finds the transaction in its
// request context: boltstore.TxFromContext gives the *bolt.Tx,
// pgstore.TxFromContext the pgx.Tx. It must write through it and must not
// commit or roll it back. A crash anywhere before the commit leaves
// nothing: no domain write and no record, in particular no record stuck
// in processing. On PostgreSQL a server that hangs instead of crashing is
// cut off after its lease (pgstore.Config.Lease). Side effects outside
// the transaction (mail, calls to other services) are not covered: give
// them their own idempotency key or an outbox.
//
// # Fingerprint
//
// Fingerprint is the SHA-256 of canonical JSON (sorted keys, no
// insignificant white space) of the method, the route (the URL path by
// default) and the body's business fields: top-level attempt metadata
// listed in Config.ExcludedFields (DefaultExcludedFields: attempt,
// attemptId, sentAt, requestId, traceId, traceparent) is left out, so a
// resend with a new timestamp or trace id is still the same request.
//
// # Expiry
//
// A record expires Config.Retention (DefaultRetention, 7 days) after its
// reservation; an expired record counts as absent at once, and
// Store.Sweep deletes it. A Sweeper runs Sweep in the background. Keep
// the retention longer than any client keeps retrying one operation.
//
// Keys are never logged: log lines carry a short hash of the key.
package idempotency
