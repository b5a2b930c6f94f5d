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
//	POST   /v1/{type}       {clientId, data, payloadVersion}  201 the entity; 200 the existing one when (actor, type, clientId) exists
//	PATCH  /v1/{type}/{id}  {data, payloadVersion}            200; data replaced unless payloadVersion is lower than the stored one
//	DELETE /v1/{type}/{id}                                    200 the entity, now "deleted": true (a tombstone: GET still shows it)
//	GET    /v1/{type}/{id}                                    200 the entity, 404 not_found
//	GET    /v1/{type}?clientId=X                              200 {"items":[...]}
//	GET    /metrics                                           Prometheus text, no token needed
//	GET    /healthz                                           200 {"status":"ok"}, no token needed
//
// An entity is {id, clientId, type, data, payloadVersion, createdAt,
// updatedAt[, deleted, deletedAt]}; id is a server-generated UUID. data
// must be a JSON object, else 400 validation. As a test hook, data with
// the top-level field "invalid": true is refused with 400 validation too,
// so daemon tests can provoke a validation failure. An update of a
// deleted entity answers 410 gone.
//
// POST, PATCH and DELETE go through the idempotency gate: they need an
// Idempotency-Key; a repeat answers the stored response with
// Idempotent-Replayed: true; the same key with another body answers 422
// idempotency_key_reused; a repeat while the first is in flight waits for
// it (or answers 409 with Retry-After). The counters
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
