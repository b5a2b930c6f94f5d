package idempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Defaults of BatchConfig.
const (
	DefaultBatchMaxOperations = 100
	DefaultBatchMaxBytes      = 8 << 20
)

// BatchConfig configures BatchHandler.
type BatchConfig struct {
	// Handler serves each operation of a batch as if it had been sent
	// alone: the routes with their gate (the same mux the single
	// requests reach, after authentication).
	Handler http.Handler
	// MaxOperations and MaxBytes bound a batch (DefaultBatchMaxOperations,
	// DefaultBatchMaxBytes); a larger one answers 413.
	MaxOperations int
	MaxBytes      int64
	// WriteError writes an error answer of the batch itself (default
	// WriteError).
	WriteError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

// BatchOperation is one operation of a batch request.
type BatchOperation struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Body           json.RawMessage `json:"body,omitempty"`
}

// BatchResult is the answer to one operation of a batch.
type BatchResult struct {
	Status   int             `json:"status"`
	Body     json.RawMessage `json:"body,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	// RetryAfter is the operation's Retry-After, in seconds, when it
	// had one (a 409 in flight, a 429, a 503).
	RetryAfter int `json:"retryAfter,omitempty"`
}

// Capabilities returns the batch part of GET /v1/capabilities.
func (c BatchConfig) Capabilities() map[string]int64 {
	c = c.withDefaults()
	return map[string]int64{"maxOperations": int64(c.MaxOperations), "maxBytes": c.MaxBytes}
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.MaxOperations <= 0 {
		c.MaxOperations = DefaultBatchMaxOperations
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultBatchMaxBytes
	}
	if c.WriteError == nil {
		c.WriteError = WriteError
	}
	return c
}

// BatchHandler serves POST /v1/batch {"operations":[{idempotencyKey,
// method, path, body}, ...]} → 200 {"results":[{status, body, replayed,
// retryAfter?}, ...]} in order. Each operation goes through
// cfg.Handler on its own, with its own Idempotency-Key, the batch's
// Authorization and the batch request's context: its own gate record,
// fingerprint, replay, in-flight 409 and 422, exactly as if it had been
// sent alone. A batch resent after a lost answer therefore replays item
// by item. The operations run one after another, in order; a failed one
// does not stop the others.
func BatchHandler(cfg BatchConfig) http.Handler {
	cfg = cfg.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, cfg.MaxBytes+1))
		if err != nil {
			cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, "reading the request body failed")
			return
		}
		if int64(len(body)) > cfg.MaxBytes {
			cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("a batch is at most %d bytes", cfg.MaxBytes))
			return
		}
		var req struct {
			Operations []BatchOperation `json:"operations"`
		}
		// An item's body sits three levels down ({"operations":[{"body":
		// ...}]}): the batch allows that much more than one request, and
		// the gate checks each item against its own limit.
		if code, msg := ambiguousJSON(body, DefaultMaxJSONDepth+3); code != "" {
			cfg.WriteError(w, r, http.StatusBadRequest, code, msg)
			return
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Operations) == 0 {
			cfg.WriteError(w, r, http.StatusBadRequest, CodeBadRequest, `the body must be {"operations":[...]} with at least one operation`)
			return
		}
		if len(req.Operations) > cfg.MaxOperations {
			cfg.WriteError(w, r, http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("a batch holds at most %d operations", cfg.MaxOperations))
			return
		}
		results := make([]BatchResult, len(req.Operations))
		for i, op := range req.Operations {
			results[i] = serveOne(cfg, r, op)
		}
		b, err := json.Marshal(struct {
			Results []BatchResult `json:"results"`
		}{results})
		if err != nil {
			cfg.WriteError(w, r, http.StatusInternalServerError, CodeInternal, "encoding the results failed")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		w.WriteHeader(http.StatusOK)
		w.Write(append(b, '\n'))
	})
}

// serveOne runs one operation of a batch through cfg.Handler.
func serveOne(cfg BatchConfig, outer *http.Request, op BatchOperation) BatchResult {
	refuse := func(msg string) BatchResult {
		b, _ := json.Marshal(map[string]map[string]string{"error": {"code": CodeBadRequest, "message": msg}})
		return BatchResult{Status: http.StatusBadRequest, Body: b}
	}
	switch op.Method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
	default:
		return refuse("method must be POST, PATCH, PUT or DELETE")
	}
	if !strings.HasPrefix(op.Path, "/") || strings.HasPrefix(op.Path, "//") || strings.Contains(op.Path, "/../") ||
		strings.HasSuffix(op.Path, "/..") || strings.Contains(op.Path, "#") {
		return refuse("path must be an absolute path on this server")
	}
	sub, err := http.NewRequestWithContext(outer.Context(), op.Method, op.Path, bytes.NewReader(op.Body))
	if err != nil {
		return refuse("path: " + err.Error())
	}
	// The path as the routes read it: "/v1/%62atch" and "/v1//batch"
	// are the batch route too.
	if path.Clean(sub.URL.Path) == path.Clean(outer.URL.Path) {
		return refuse("a batch cannot hold a batch")
	}
	sub.Host, sub.RemoteAddr = outer.Host, outer.RemoteAddr
	sub.Header.Set("Authorization", outer.Header.Get("Authorization"))
	if op.IdempotencyKey != "" {
		sub.Header.Set(HeaderKey, op.IdempotencyKey)
	}
	if len(op.Body) > 0 {
		sub.Header.Set("Content-Type", "application/json")
	}
	rec := newRecorder(1 << 62)
	cfg.Handler.ServeHTTP(rec, sub)
	res := BatchResult{Status: rec.status, Replayed: rec.header.Get(HeaderReplayed) == "true"}
	if ra, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && ra > 0 {
		res.RetryAfter = ra
	}
	if body := bytes.TrimSpace(rec.body.Bytes()); len(body) > 0 {
		if json.Valid(body) {
			res.Body = body
		} else {
			res.Body, _ = json.Marshal(string(body))
		}
	}
	return res
}
