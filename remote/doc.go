// Package remote is the reference remote server of syncd: the server the
// daemon syncs to in development, in tests and benchmarks, and as the
// embedded default on loopback. It is built on package idempotency and is
// not required in production: a real backend mounts the idempotency gate
// in front of its own routes instead (see docs/server.md).
//
// It owns generic entity routes for any entity type, bearer-token
// authentication (token to actor), its storage (a bbolt file or
// PostgreSQL, shared with the idempotency records so that every write and
// its idempotency record commit in one transaction) and its Prometheus
// registry. It does not know about the daemon, its queue or its local
// API.
//
// Routes (JSON; errors are {"error":{"code":"...","message":"..."}}):
//
//	POST   /v1/{type}       {clientId, data, payloadVersion}  201 the entity; when (actor, type, clientId) names a live one, 200 with it (merged into it under merge; 409 version_conflict on a field it holds with another value)
//	PATCH  /v1/{type}/{id}  {data, payloadVersion, baseVersion?, paths?}  200 the entity, version + 1: the named paths changed (merge) or data replaced; 409 version_conflict
//	DELETE /v1/{type}/{id}[?baseVersion=N]                    200 the entity, now "deleted": true (a tombstone: GET still shows it, without data); 409 version_conflict
//	GET    /v1/{type}/{id}                                    200 the entity, 404 not_found
//	GET    /v1/{type}/{id}/versions                           200 {"items":[{version, data, deleted, operationId, updatedAt}]}: the kept versions, newest first
//	GET    /v1/{type}?clientId=X                              200 {"items":[...]}: the single-record read, zero or one
//	GET    /v1/changes?after=&limit=&wait=                    200 {"changes":[...],"cursor","hasMore","progress":{"at","of"}}; 410 cursor_expired
//	POST   /v1/batch        {operations:[...]}               200 {"results":[...]}: each operation through the gate on its own, all committed together
//	GET    /v1/capabilities                                   200 {"changes":true, "batch":{...}, "conflicts":{"default","types"}, "versions":true}
//	GET    /metrics                                           Prometheus text, no token needed
//	GET    /healthz                                           200 {"status":"ok"}, no token needed
//
// An entity is {id, clientId, type, data, payloadVersion, version,
// operationId, createdAt, updatedAt[, deleted, deletedAt]}; id is a
// server-generated UUID; version counts the applied writes (1 at
// create, +1 per update, delete and revival) and operationId is the
// Idempotency-Key of the write that made it. payloadVersion is stored
// and answered but decides nothing.
//
// What happens to a write made on an older version than the record's
// (its baseVersion) is its type's conflict policy (Config.Conflicts,
// "*" the default; Config.RejectConflicts; ParsePolicies reads
// `syncd server --conflicts`):
//
//   - PolicyMerge, the default, merges field by field (package
//     fieldmerge): an update naming the paths (JSON pointers) it changes
//     applies them unless another write changed an overlapping path
//     after its baseVersion, and then answers 409 version_conflict with
//     "current", the conflicting "paths" and the record at the base
//     ("base", when the history still holds it), applying nothing. An
//     update without paths and a delete are refused whole when their
//     base is old, with the paths changed since. A create whose clientId
//     names a live record merges its fields into it. Each record keeps
//     the version of each path's latest change for this.
//   - PolicyReject refuses, with 409 version_conflict and the current
//     record, an update or delete whose baseVersion is below the
//     record's version.
//   - PolicyLWW applies every write whole, in arrival order: last
//     writer wins.
//
// Each record keeps its latest Config.HistoryVersions versions (those
// older than Config.HistoryAge are swept, the current one never), read
// at GET /v1/{type}/{id}/versions and in a conflict's "base".
//
// The changes feed (package changefeed) lists an actor's records
// changed after a cursor, in commit order, deletes as tombstones kept
// Config.TombstoneRetention (the last page of a read ends at the
// actor's head, a cursor the server accepts); a long poll (wait)
// answers as soon as a write of the actor commits, across replicas on
// PostgreSQL (LISTEN/NOTIFY). data must be a JSON object, else 400
// validation. As a test hook, data with the top-level field
// "invalid": true is refused with 400 validation too, so daemon tests
// can provoke a validation failure. An update of a deleted entity
// answers 410 gone.
//
// One record per (actor, type, clientId). A create whose clientId names a
// live record answers that record, 200, and changes nothing but, under
// PolicyMerge, the fields it adds: that is what makes a create resent
// after its idempotency record expired harmless (but for a field removed
// by a write of the whole data since, which it brings back). A
// create whose clientId names a deleted record (a tombstone) brings the
// record back, 201: same id, the create's data, payloadVersion and
// createdAt, no longer deleted, version + 1. The app deleted the entity and made it
// again under the same local id; answering the tombstone would let the
// daemon mark the new create synced while the server kept only the
// deleted record. The id stays so that the clientId still names one
// record, the unique index and GET ?clientId=X keep meaning that, and a
// client that kept the old server id still updates and deletes the right
// record by it. The lookup and the
// write are one transaction: of racing creates of a deleted clientId one
// brings it back (201) and the others answer it (200). A client must not
// resend a create after the idempotency retention (the daemon fails such
// operations for review instead): if the record was deleted meanwhile,
// the resend would bring it back.
//
// POST, PATCH and DELETE go through the idempotency gate: they need an
// Idempotency-Key; a repeat answers the stored response with
// Idempotent-Replayed: true; the same key with another body answers 422
// idempotency_key_reused; a repeat while the first is in flight answers
// 409 with Retry-After. The counters
// idempotency_replays_total{operation="create|update|delete"} and
// idempotency_conflicts_total (422 answers) are on the server's own
// registry, so several servers in one process do not clash.
//
// Authentication: Authorization: Bearer <token>. Config.Tokens maps
// tokens to actors (ReadTokensFile reads a "TOKEN ACTOR" file). With
// Config.DevTokens, any token is accepted and its actor is the part
// before the first '.', so "alice.1" and a refreshed "alice.2" share
// alice's idempotency scope. Missing or unknown tokens answer 401
// unauthorized.
package remote
