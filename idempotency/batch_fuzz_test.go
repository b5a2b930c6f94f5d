package idempotency

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzBatchHandler: any batch body is answered 200 with one result per
// operation, in order, each with a status and a JSON body, or refused
// 400 or 413 as a whole with an error body; and what reaches the routes
// is only an operation sent alone could be: a write method, an absolute
// path on this server, never the batch route itself (a batch cannot
// hold a batch, however its path is spelled).
func FuzzBatchHandler(f *testing.F) {
	for _, s := range []string{
		`{"operations":[{"idempotencyKey":"k1","method":"POST","path":"/v1/notes","body":{"clientId":"c","data":{}}}]}`,
		`{"operations":[{"idempotencyKey":"k1","method":"PATCH","path":"/v1/notes/s1","body":{"data":{},"baseVersion":3}},{"method":"DELETE","path":"/v1/notes/s1?baseVersion=4"}]}`,
		`{"operations":[{"method":"GET","path":"/v1/notes"}]}`,
		`{"operations":[{"method":"POST","path":"/v1/batch","body":{"operations":[]}}]}`,
		`{"operations":[{"method":"POST","path":"/v1/%62atch","body":{"operations":[]}}]}`,
		`{"operations":[{"method":"POST","path":"/v1/./batch"}]}`,
		`{"operations":[{"method":"POST","path":"/v1//batch"}]}`,
		`{"operations":[{"method":"POST","path":"/v1/batch?x=1"}]}`,
		`{"operations":[{"method":"POST","path":"//evil.example/v1/notes"}]}`,
		`{"operations":[{"method":"POST","path":"/v1/notes/.."}]}`,
		`{"operations":[{"method":"POST","path":"/v1/notes#x"}]}`,
		`{"operations":[{"method":"POST","path":"/v1/notes","body":"text"}]}`,
		`{"operations":[]}`, `{"operations":[{}],"operations":[]}`, `[]`, ``, `{"operations":[{"path":"\u0000"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Method {
			case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
			default:
				t.Fatalf("a %s reached the routes", r.Method)
			}
			if r.URL.Path == "/v1/batch" || !strings.HasPrefix(r.URL.Path, "/") || r.URL.Host != "" {
				t.Fatalf("a request for %q (host %q) reached the routes", r.URL.Path, r.URL.Host)
			}
			io.Copy(io.Discard, r.Body)
			switch {
			case strings.HasSuffix(r.URL.Path, "/text"):
				io.WriteString(w, "not json")
			case strings.HasSuffix(r.URL.Path, "/empty"):
				w.WriteHeader(http.StatusNoContent)
			default:
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"ok":true}`)
			}
		})
		h := BatchHandler(BatchConfig{Handler: routes, MaxOperations: 8, MaxBytes: 1 << 16})
		req := httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(string(body)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code == "" {
				t.Fatalf("refused %d %s", rec.Code, rec.Body)
			}
			return
		}
		var in struct {
			Operations []json.RawMessage `json:"operations"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("answered 200 to a body that is no batch: %v", err)
		}
		var out struct {
			Results []BatchResult `json:"results"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Results) != len(in.Operations) {
			t.Fatalf("%d results (%v) for %d operations: %s", len(out.Results), err, len(in.Operations), rec.Body)
		}
		for i, res := range out.Results {
			if res.Status < 100 || res.Status > 599 || res.RetryAfter < 0 || len(res.Body) > 0 && !json.Valid(res.Body) {
				t.Fatalf("result %d: %+v", i, res)
			}
		}
	})
}

// What FuzzBatchHandler found: a batch held a batch when its path was
// spelled otherwise ("/v1/%62atch").
func TestBatchHoldsNoBatchHoweverSpelled(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/v1/batch", "/v1/%62atch", "/v1//batch", "/v1/./batch", "/v1/batch?x=1"} {
		reached := false
		routes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true })
		h := BatchHandler(BatchConfig{Handler: routes})
		body := `{"operations":[{"method":"POST","path":"` + p + `","body":{"operations":[]}}]}`
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/batch", strings.NewReader(body)))
		var out struct{ Results []BatchResult }
		if json.Unmarshal(rec.Body.Bytes(), &out) != nil || len(out.Results) != 1 || out.Results[0].Status != http.StatusBadRequest || reached {
			t.Errorf("path %q: %d %s (reached the routes: %v)", p, rec.Code, rec.Body, reached)
		}
	}
}
