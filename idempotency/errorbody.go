package idempotency

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
)

// WriteError writes {"error":{"code":code,"message":message}} with status.
// It is the default Config.WriteError.
func WriteError(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	type errBody struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Error errBody `json:"error"`
	}{errBody{code, message}})
	writeBody(w, status, "application/json", b)
}

// WriteProblem writes an RFC 9457 problem details object with status:
// application/problem+json {"type":"about:blank","title":(the status
// text),"status":status,"detail":message,"code":code}. code is an
// extension member, the same stable string WriteError writes, so a
// client switches on it in either shape. Set it as Config.WriteError
// (and BatchConfig.WriteError) to have the gate, the handlers that call
// Error and the batch answer problem details.
func WriteProblem(w http.ResponseWriter, _ *http.Request, status int, code, message string) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}{"about:blank", http.StatusText(status), status, message, code})
	writeBody(w, status, "application/problem+json", b)
}

func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Error writes an error answer from a handler behind the gate in the
// gate's shape: with the Config.WriteError of the gate that runs r (so a
// gate set to WriteProblem makes its handlers answer problem details
// too), or with WriteError outside a gate. A handler that answers its
// errors through it gives clients one error shape, whoever refuses.
func Error(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	write := WriteError
	if info, ok := r.Context().Value(requestKey{}).(*requestInfo); ok && info.writeError != nil {
		write = info.writeError
	}
	write(w, r, status, code, message)
}

// requestInfo is what the gate tells the code it runs about its request.
type requestInfo struct {
	key        string
	writeError func(w http.ResponseWriter, r *http.Request, status int, code, message string)
}

type requestKey struct{}

// KeyFromContext returns the Idempotency-Key of the gated request (or
// the key of Gate.Do) whose context ctx is, as the gate parsed it
// (unquoted), so a domain row can store it without reading the header
// again; ok is false outside a gated request. Keys are scoped by actor:
// store the pair if the key is to be unique.
func KeyFromContext(ctx context.Context) (key string, ok bool) {
	info, ok := ctx.Value(requestKey{}).(*requestInfo)
	if !ok {
		return "", false
	}
	return info.key, true
}
