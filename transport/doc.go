// Package transport talks to the remote server: it turns one attempt of
// one queued operation (a Request) into an HTTP request, sends it with a
// per-request timeout, and classifies whatever happens into an Outcome
// with one Decision from DESIGN.md's outcome table. It also holds the
// retry arithmetic (Backoff, Policy, ParseRetryAfter) the daemon uses to
// schedule the next attempt.
//
// # What it owns
//
//   - Routes. By default create is POST {base}/v1/{type} with body
//     {"clientId","data","payloadVersion"}, update is PATCH
//     {base}/v1/{type}/{serverId} with body {"data","payloadVersion"}, and
//     delete is DELETE {base}/v1/{type}/{serverId}. Config.Routes
//     overrides method, path template ({type}, {serverId}, {clientId},
//     each path-escaped) and the field of the create response that holds
//     the server id, per entity type.
//   - Headers. Every request carries Idempotency-Key: <operation id> and
//     Authorization: Bearer <token>. The token is the one the daemon puts
//     in Request.Token from the current session of the operation's
//     account, never one from the payload.
//   - A per-request timeout (Config.Timeout) over the whole exchange.
//   - Classification, below.
//
// # Classification
//
// Every Send returns an Outcome whose Decision is one of Done, Retry,
// RefreshSession, Permanent, NeedsUserAction, with a stable Code:
//
//	network error, reset, timeout         Retry          network, timeout
//	caller's ctx ended                    Retry          canceled
//	408, 429, 503                         Retry          request_timeout, rate_limited, unavailable
//	other 5xx                             Retry          server_error
//	409 (in flight)                       Retry          in_flight
//	409 version_conflict                  Conflict       version_conflict (Outcome.Current: the server's record)
//	401, or no token                      RefreshSession unauthorized, missing_token
//	403                                   Permanent      forbidden
//	404 on delete                         Done           not_found (already gone)
//	404 on create or update               Permanent      not_found
//	410 on delete                         Done           gone
//	410 on update                         Conflict       deleted_on_server
//	410 on create                         Permanent      gone (deleted on the server)
//	422 idempotency_key_reused            Permanent      payload_conflict
//	400, 422 (other)                      NeedsUserAction validation
//	other 4xx                             NeedsUserAction rejected
//	1xx, 3xx (redirects not followed)     Permanent      unexpected_status
//	2xx, replayed or not                  Done           "" (Replayed tells)
//	2xx create without a server id        Permanent      invalid_response
//	2xx create, body over the cap         Permanent      response_too_large
//	update/delete route needs {serverId}  Permanent      missing_server_id (not sent)
//	malformed Request                     Permanent      invalid_request (not sent)
//
// A 409 counts as in flight when it has a Retry-After, no error code, or
// an in-flight error code; version_conflict is a Conflict with another
// device's write; a 409 with another code is a domain conflict
// (rejected). A response whose body cannot be read completely is Retry
// (network or timeout) whatever its status: a 2xx may have committed, and
// the resend gets the stored answer replayed. Outcome.Code is a closed set
// fit for metric labels; the server's own code is Outcome.ServerCode.
//
// # Transparent resends by net/http
//
// net/http's Transport resends a request on a new connection when a reused
// keep-alive connection dies before any byte of the answer, if the request
// is replayable: GET and the like, or any request with an Idempotency-Key
// header (see net/http's Request.isReplayable). Every request here has
// one, so one Send may be several wire attempts. Request bodies are
// rewindable (GetBody), so a resend carries the same bytes with the same
// key, and the server's idempotency record makes it safe. Outcome.Sends
// counts the wire attempts (httptrace WroteRequest); the daemon counts one
// attempt per Send.
//
// # Retrying
//
// Policy.Next schedules a Retry outcome at now + max(Retry-After, jittered
// backoff): a server's Retry-After is a floor, never cut short (up to
// Policy.MaxRetryAfter, which guards against absurd dates), and the
// backoff is capped exponential with full jitter. Retrying stops by error
// kind (only Retry outcomes are retried; Permanent and NeedsUserAction
// stop at once; RefreshSession waits for a token, not for time) and by
// elapsed time since the operation was created (Policy.MaxElapsed), not by
// a bare attempt count: an app offline for hours fails many attempts that
// say nothing about the operation. MaxElapsed stays below the server's
// idempotency retention, because a resend after the server forgot the key
// could apply the operation twice; past it the operation fails with
// retry_expired for the user to review. That danger exists only for an
// operation an attempt of which may have been applied: the daemon asks
// Policy.Delay alone, with no deadline, for one that cannot have been.
//
// # What it does not own
//
// transport does not touch bbolt nor import the queue: the daemon maps a
// queue operation onto a Request, resolves the server id and the token at
// send time, records the Outcome, reconciles, and decides when to call
// Send. It keeps no state between Sends beyond net/http's connection pool,
// starts no goroutines of its own, and does not sleep: scheduling is the
// daemon's.
package transport
