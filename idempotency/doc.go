// Package idempotency is the server half of syncd's delivery contract, as
// a library any Go HTTP backend can mount: a Gate that makes POST, PATCH,
// PUT and DELETE handlers safe to retry with an Idempotency-Key, after
// the IETF Idempotency-Key header draft and Stripe.
//
// It owns the gate (reserve, replay, conflict, in flight), the request
// fingerprint, the Store interface with its record lifecycle
// (processing, completed, expired) and the expiry Sweeper. The stores
// live in subpackages: boltstore (embedded, one bbolt file), pgstore
// (PostgreSQL through pgx, for many server replicas) and sqlstore (the
// same tables through database/sql); idempotencytest is the conformance
// suite a Store must pass. It does not know about the syncd
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
//   - a JSON body with invalid UTF-8, a lone surrogate or a repeated
//     member name: 400 bad_request, before anything runs; one nested
//     deeper than Config.MaxJSONDepth (128): 400 json_too_deep;
//   - a new (actor, key): the handler runs, and its answer is stored if it
//     is final (below);
//   - the same (actor, key) and the same fingerprint again: the stored
//     status, result headers (Config.ReplayedHeaders) and body, with
//     Idempotent-Replayed: true, read from the committed record before
//     any reservation (Store.Get), or, on a store whose reservation
//     reads it without waiting (ReadingStore: pgstore), by the
//     reservation itself; resends of a finished request never answer
//     409, however many arrive together on however many replicas;
//   - the same (actor, key) with another fingerprint: 422
//     idempotency_key_reused, and the handler does not run;
//   - the same (actor, key) while the first request is still running, in
//     this process or on another replica: 409 idempotency_in_flight with
//     Retry-After (Config.RetryAfter plus up to as much again of
//     jitter), at once (Config.InFlightWait lets a duplicate in the
//     same process wait and replay instead);
//   - a store failure while completing or committing, after the handler
//     ran, that leaves the outcome unknown (a connection lost during
//     COMMIT): 503 outcome_unknown with Retry-After, since the request
//     may or may not have taken effect; a retry with the same key
//     replays or runs it. A failure the database answered (it rolled the
//     transaction back) is 500 internal: nothing was done;
//   - a handler one of whose statements failed, which on PostgreSQL
//     aborts the transaction (the natural "insert, catch the unique
//     violation, answer 409"): a final refusal (a 4xx Config.Stored
//     keeps) is stored and replayed without the handler's writes, since
//     the gate rolls back to the savepoint it took after the reservation
//     (SavepointTx); a success answer is 500 internal, nothing was done.
//
// Errors are {"error":{"code":"...","message":"..."}}; WriteProblem, as
// Config.WriteError, writes RFC 9457 problem details instead. A handler
// that writes its errors with Error answers in its gate's shape. A handler's answer is final for its key, and
// stored with the writes the handler made, unless it says the request was
// not authorised or not attempted: 401, 403, 408, 425, 429 and 5xx
// (Config.Stored, default Storable). Those roll the transaction back,
// domain writes included, and a retry with the same key runs the handler
// again. An answer over Config.MaxResponseBytes is rolled back too, and
// the client gets 500 response_too_large.
//
// Gate.Do gives code that is not an HTTP handler (a queue consumer, a
// gRPC method) the same guarantee on the same stores. BatchHandler serves
// many operations in one request, each through the gate on its own; with
// a GroupStore (boltstore, pgstore) in BatchConfig.Store they commit
// together, in one group transaction (one fsync, one COMMIT), each keeping
// its own record, answer and rollback.
//
// # One transaction
//
// The reservation, the handler's domain write and the stored response
// commit in ONE store transaction, and the response reaches the client
// only after that commit. The handler finds the transaction in its
// request context: boltstore.TxFromContext gives the *bolt.Tx,
// pgstore.TxFromContext a pgx.Tx, sqlstore.TxFromContext a DBTX for
// database/sql code. It must write through it and must not commit or roll
// it back; KeyFromContext gives it the request's key. Once it has
// answered, the completion and the commit run even if the client has
// gone, and the client's resend replays. On PostgreSQL the handler runs
// after a savepoint the gate
// holds (pgstore sends it with the reservation, at no extra round trip;
// sqlstore in one more). A crash anywhere before the commit leaves
// nothing: no domain write and no record, in particular no record stuck
// in processing. On PostgreSQL a server that hangs instead of crashing
// is cut off after its lease (pgstore.Config.Lease). A processing record that is committed
// anyway (a handler that commits the transaction itself) holds its key
// only for Config.ProcessingLease. Side effects outside the transaction
// (mail, calls to other services) are not covered: give them their own
// idempotency key or an outbox.
//
// # Fingerprint
//
// Fingerprint is the SHA-256 of canonical JSON (sorted keys, no
// insignificant white space) of the method, the route (DefaultRoute: the
// URL path and the query with its parameters sorted) and the body.
// The media type counts too (FingerprintContent): a body that is not
// JSON, or of another JSON type than application/json, adds its
// Content-Type, so the same bytes as text/plain do not replay a JSON
// answer. Top-level fields named in Config.ExcludedFields (attempt metadata such
// as a sentAt; none by default) are left out, so a resend with a new
// timestamp is still the same request.
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
