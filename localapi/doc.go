// Package localapi is syncd's loopback HTTP API: the endpoints desktop
// apps call to set the session, write and read their entities, inspect
// the outgoing queue and act on failed operations, and read the daemon's
// status.
//
// It owns the API's security (one guard in front of every route: loopback
// Host names only, an Origin allowlist, a bearer token compared in
// constant time, a body size limit, each route's scope, security headers
// on every response, a recover that answers a handler's panic with 500
// internal), the two kinds of token (the admin token, and app tokens
// scoped to entity types and maybe read-only: apps.go), the
// connection limits (header, body, write and idle timeouts; a bound on
// connections that have not authenticated; see limits.go),
// strict request parsing, the app's Idempotency-Key, and the error shape
// {"error":{"code","message"}} with stable codes. It holds no sync logic:
// writes and reads go to package queue, the session and status to package
// daemon.
//
// # Requests
//
// A handler reads: method (the mux) → parse (400) → look up (404) → act →
// JSON. Bad input is refused before anything is written. Bodies are one
// JSON object, Content-Type application/json, no unknown fields, nothing
// after the object, and JSON every reader takes alike (jsonstrict: no
// invalid UTF-8, lone surrogate or duplicate member name, at most
// MaxJSONDepth deep). Ids "." and ".." are refused everywhere.
//
// # Idempotency
//
// An entity write (POST, PATCH or DELETE under /v1/entities) may carry an
// Idempotency-Key header. The key becomes the operation's id, so one user
// intent keeps one id from the app to the remote server. The write's
// fingerprint (SHA-256 of the operation, entity type, entity id and
// canonical data, all decoded, so the path's escaping does not count) is
// stored with the operation: the same key and write again, alone or as a
// batch's write with its idempotencyKey, answer with the same status and
// operationId and the header Idempotent-Replayed: true, writing nothing;
// the same key with another write is refused with 422
// idempotency_key_reused.
//
// # Events
//
// GET /v1/events is a WebSocket stream of the daemon's event bus: replay
// after ?since=N, then live events, a resync event when N is older than
// the retained history, filters by type, entity type and account. Slow
// subscribers are closed with 1008, all of them with 1001 at shutdown.
// A since past the newest seq (up to 2^64-1) is a resync; the replay is
// read from the data file in chunks.
// See docs/events.md.
//
// # Status page
//
// The daemon's status page (ui.go, uiauth.go; docs/ui.md) is served
// under /ui/ on the same listeners, inside the same guard, but signed in
// without the token: POST /v1/ui/links (admin token) makes a one-time
// code, valid for UILinkLifetime; GET /ui/login?code= trades it for a
// session cookie (HttpOnly, SameSite=Strict, Path=/ui/, for
// UISessionLifetime; sessions live in memory); the page's files are
// embedded (uiassets, go:embed) and served with the session only; its
// requests reach the whole API under /ui/api/ with the admin token's
// scope, writes with the session's CSRF token and the page's own
// Origin. Config.UIOff turns it off. GET /v1/status/history serves the
// samples of a daemon.History (Config.History).
//
// # Description
//
// openapi.json, embedded and served at GET /v1/openapi.json, describes
// every route; TestOpenAPIMatchesRoutes holds it to the routes registered.
//
// See docs/localapi.md for the endpoint reference.
package localapi
