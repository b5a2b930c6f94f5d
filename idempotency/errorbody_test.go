package idempotency_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncd/syncd/idempotency"
)

// TestOneErrorShape: the gate's errors, a handler's errors written with
// Error and a batch's own refusals have one shape: {"error":{code,
// message}} by default, RFC 9457 problem details with WriteProblem.
func TestOneErrorShape(t *testing.T) {
	t.Parallel()
	type writer = func(w http.ResponseWriter, r *http.Request, status int, code, message string)
	tests := []struct {
		name        string
		write       writer // nil: the default
		contentType string
		code        func(t *testing.T, status int, body []byte) string
	}{
		{"default", nil, "application/json", func(t *testing.T, _ int, body []byte) string {
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("not {\"error\":{code,message}}: %s", body)
			}
			return e.Error.Code
		}},
		{"problem", idempotency.WriteProblem, "application/problem+json", func(t *testing.T, status int, body []byte) string {
			var p struct {
				Type, Title, Detail, Code string
				Status                    int
			}
			if err := json.Unmarshal(body, &p); err != nil || p.Type != "about:blank" || p.Title != http.StatusText(status) ||
				p.Status != status || p.Detail == "" {
				t.Fatalf("not problem details for %d: %s", status, body)
			}
			return p.Code
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			g, err := idempotency.New(idempotency.Config{Store: store, WriteError: tt.write,
				Actor: func(*http.Request) (string, error) { return "alice", nil }})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /things", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				idempotency.Error(w, r, http.StatusUnprocessableEntity, "validation", "the thing needs a name")
			})))
			mux.Handle("POST /batch", idempotency.BatchHandler(idempotency.BatchConfig{Handler: mux, Store: store, WriteError: tt.write}))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			send := func(path, key, body string) (int, string, []byte) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
				if key != "" {
					req.Header.Set(idempotency.HeaderKey, key)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, resp.Header.Get("Content-Type"), b
			}
			check := func(what string, status int, ct string, body []byte, wantStatus int, wantCode string) {
				t.Helper()
				if status != wantStatus || ct != tt.contentType {
					t.Fatalf("%s: %d %s %s, want %d %s", what, status, ct, body, wantStatus, tt.contentType)
				}
				if code := tt.code(t, status, body); code != wantCode {
					t.Fatalf("%s: code %q, want %q", what, code, wantCode)
				}
			}
			// The gate's own refusal, and the handler's error: stored and
			// replayed in the same shape.
			status, ct, body := send("/things", "", `{}`)
			check("the gate's 400", status, ct, body, http.StatusBadRequest, idempotency.CodeKeyMissing)
			for range 2 {
				status, ct, body = send("/things", "k1", `{}`)
				check("the handler's 422", status, ct, body, http.StatusUnprocessableEntity, "validation")
			}
			// The batch's own refusal of an operation, and the handler's.
			status, _, body = send("/batch", "", `{"operations":[
				{"idempotencyKey":"k2","method":"POST","path":"/things","body":{}},
				{"idempotencyKey":"k3","method":"POST","path":"/things","body":{},"after":0}]}`)
			var out struct{ Results []idempotency.BatchResult }
			if err := json.Unmarshal(body, &out); status != http.StatusOK || err != nil || len(out.Results) != 2 {
				t.Fatalf("batch: %d %s", status, body)
			}
			for i, want := range []struct {
				status int
				code   string
			}{{http.StatusUnprocessableEntity, "validation"}, {http.StatusBadRequest, idempotency.CodeBadRequest}} {
				r := out.Results[i]
				check("batch operation", r.Status, r.Headers.Get("Content-Type"), r.Body, want.status, want.code)
			}
		})
	}
}

// TestFingerprintContent: the media type is part of the request; JSON
// requests keep the fingerprint they had before it counted.
func TestFingerprintContent(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a": 1}`)
	fp := func(ct string, b []byte) string { return idempotency.FingerprintContent("POST", "/x", ct, b, nil) }
	plain := idempotency.Fingerprint("POST", "/x", body, nil)
	same := []struct{ a, b string }{
		{"", "application/json"},
		{"application/json", "application/json; charset=utf-8"},
		{"application/json", "APPLICATION/JSON"},
		{"text/plain; charset=utf-8", "text/plain; charset=UTF-8"},
		{"text/plain;charset=utf-8", "text/plain; charset=utf-8"},
	}
	for _, tt := range same {
		if fp(tt.a, body) != fp(tt.b, body) {
			t.Errorf("%q and %q differ", tt.a, tt.b)
		}
	}
	if fp("application/json", body) != plain || fp("", body) != plain {
		t.Error("a JSON request's fingerprint changed")
	}
	differ := []string{"text/plain", "text/plain; charset=latin1", "application/merge-patch+json", "application/octet-stream", "not a type"}
	seen := map[string]string{plain: "application/json"}
	for _, ct := range differ {
		f := fp(ct, body)
		if other, dup := seen[f]; dup {
			t.Errorf("%q has the fingerprint of %q", ct, other)
		}
		seen[f] = ct
	}
	// A +json type is canonical JSON; any other type is its bytes.
	if fp("application/merge-patch+json", body) != fp("application/merge-patch+json", []byte(`{"a":1}`)) {
		t.Error("merge-patch+json: white space changed the fingerprint")
	}
	if fp("text/plain", body) == fp("text/plain", []byte(`{"a":1}`)) {
		t.Error("text/plain: a body differing in white space has the same fingerprint")
	}
	// An empty body has no type.
	if fp("text/plain", nil) != fp("", nil) {
		t.Error("an empty body's Content-Type changed its fingerprint")
	}
}
