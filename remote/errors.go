package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/syncd/syncd/changefeed"
)

// Configuration errors, returned by New.
var (
	// ErrNoStorage means Config names no storage: set Path, DataDir,
	// PostgresDSN, BoltDB or PostgresPool.
	ErrNoStorage = errors.New("remote: no storage configured (bbolt path or data dir, or PostgreSQL DSN)")
	// ErrTwoStorages means Config names both a bbolt and a PostgreSQL
	// storage.
	ErrTwoStorages = errors.New("remote: both bbolt and PostgreSQL storage configured")
	// ErrNoAuth means Config has neither Tokens nor DevTokens.
	ErrNoAuth = errors.New("remote: no tokens configured (set Tokens, or DevTokens for development)")
)

// Domain errors.
var (
	// ErrNotFound: no entity with that id for that actor and type.
	ErrNotFound = errors.New("remote: entity not found")
	// errNoTx: a write ran outside a gated request.
	errNoTx = errors.New("remote: no store transaction in the request context")
)

// Error codes in {"error":{"code":...}} answers, besides the
// idempotency gate's (idempotency.Code*).
const (
	CodeValidation   = "validation"   // 400: bad body, data not an object, or data.invalid == true
	CodeNotFound     = "not_found"    // 404
	CodeGone         = "gone"         // 410: update of a deleted entity
	CodeUnauthorized = "unauthorized" // 401: missing or unknown bearer token
	CodeInternal     = "internal"     // 500
	// 409: the type's conflict policy refused the write made on its
	// baseVersion (reject: any older base; merge: a field another write
	// changed since, named in "paths"); "current" holds the record.
	CodeVersionConflict = "version_conflict"
	CodeInvalidCursor   = changefeed.CodeInvalidCursor // 400: GET /v1/changes with a cursor this server did not give
	CodeCursorExpired   = changefeed.CodeCursorExpired // 410: the tombstones the cursor needs were swept
)

// errorBody is the inside of an {"error":{...}} answer.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError is the one function that writes error answers, for the
// handlers and (through idempotency.Config.WriteError) the gate.
func writeError(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	writeJSON(w, status, struct {
		Error errorBody `json:"error"`
	}{errorBody{code, message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	// No HTML escaping: data goes back as the client sent it, not with
	// each <, > and & grown to six bytes.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	b := []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}` + "\n")
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
	} else {
		b = buf.Bytes() // Encode ends it with a newline
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
