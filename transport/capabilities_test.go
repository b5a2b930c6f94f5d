package transport

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncd/syncd/idempotency"
	refserver "github.com/syncd/syncd/remote"
)

// TestCapabilities: the request (route, token), an advertisement read
// back, and every answer that says "nothing advertised" told apart from
// one worth reading again later.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{"batch":{"maxOperations":3,"maxBytes":2048},"changes":true,"merge":{"x":1}}`))
	c := newClient(t, rm, Config{BaseURL: rm.URL + "/app"})
	got, err := c.Capabilities(context.Background(), "alice.1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Batch == nil || got.Batch.MaxOperations != 3 || got.Batch.MaxBytes != 2048 || !got.Changes {
		t.Fatalf("capabilities %+v (batch %+v)", got, got.Batch)
	}
	req := rm.requests()[0]
	if req.Method != "GET" || req.RequestURI != "/app/v1/capabilities" || req.Header.Get("Authorization") != "Bearer alice.1" {
		t.Fatalf("request %s %s %q", req.Method, req.RequestURI, req.Header.Get("Authorization"))
	}
	if _, err := c.Capabilities(context.Background(), "alice\n"); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("unsendable token: %v", err)
	}

	tests := []struct {
		name    string
		answer  http.HandlerFunc
		want    error // nil: caps
		batch   *BatchCapability
		changes bool
	}{
		{"changes only", reply(200, `{"changes":true}`), nil, nil, true},
		{"batch only", reply(200, `{"batch":{"maxOperations":1e2,"maxBytes":8388608.0}}`), nil, &BatchCapability{100, 8 << 20, false}, false},
		{"chains", reply(200, `{"batch":{"maxOperations":3,"maxBytes":99,"chains":true}}`), nil, &BatchCapability{3, 99, true}, false},
		{"chains not true", reply(200, `{"batch":{"maxOperations":3,"maxBytes":99,"chains":"yes"}}`), nil, &BatchCapability{3, 99, false}, false},
		{"batch null, changes false", reply(200, `{"batch":null,"changes":false}`), nil, nil, false},
		{"batch false", reply(200, `{"batch":false,"changes":null}`), nil, nil, false},
		{"huge limits", reply(200, `{"batch":{"maxOperations":99999999999,"maxBytes":99999999999}}`), nil, &BatchCapability{1<<31 - 1, 99999999999, false}, false},

		{"404", reply(404, `{"error":{"code":"not_found","message":"no"}}`), ErrNoCapabilities, nil, false},
		{"405", reply(405, ``), ErrNoCapabilities, nil, false},
		{"400 unknown type", reply(400, `{"error":{"code":"unknown_type"}}`), ErrNoCapabilities, nil, false},
		{"501", reply(501, ``), ErrNoCapabilities, nil, false},
		{"redirect", reply(302, ``, "Location", "/login"), ErrNoCapabilities, nil, false},
		{"a list of records", reply(200, `[{"id":"c1"}]`), ErrNoCapabilities, nil, false},
		{"a page of records", reply(200, `{"items":[],"next":""}`), ErrNoCapabilities, nil, false},
		{"an empty object", reply(200, `{}`), ErrNoCapabilities, nil, false},
		{"a record named batch", reply(200, `{"id":"x","batch":"yes"}`), ErrNoCapabilities, nil, false},
		{"batch without limits", reply(200, `{"batch":{}}`), ErrNoCapabilities, nil, false},
		{"batch of zero", reply(200, `{"batch":{"maxOperations":0,"maxBytes":10}}`), ErrNoCapabilities, nil, false},
		{"fractional limit", reply(200, `{"batch":{"maxOperations":2.5,"maxBytes":10}}`), ErrNoCapabilities, nil, false},
		{"limit as a string", reply(200, `{"batch":{"maxOperations":"5","maxBytes":10}}`), ErrNoCapabilities, nil, false},
		{"changes as a string", reply(200, `{"changes":"true"}`), ErrNoCapabilities, nil, false},
		{"duplicated member", reply(200, `{"changes":false,"changes":true}`), ErrNoCapabilities, nil, false},
		{"not JSON", reply(200, `<html>hello</html>`), ErrNoCapabilities, nil, false},
		{"empty 204", reply(204, ``), ErrNoCapabilities, nil, false},
		{"too long", reply(200, `{"changes":true,"pad":"`+strings.Repeat("x", maxCapabilitiesBody)+`"}`), ErrNoCapabilities, nil, false},

		{"token refused", reply(401, `{"error":{"code":"unauthorized"}}`), ErrUnauthorized, nil, false},
		{"unavailable", reply(503, ``), ErrStatus, nil, false},
		{"rate limited", reply(429, ``), ErrStatus, nil, false},
		{"request timeout", reply(408, ``), ErrStatus, nil, false},
	}
	for _, tt := range tests {
		rm := newRemote(t, tt.answer)
		got, err := newClient(t, rm, Config{}).Capabilities(context.Background(), "alice.1")
		switch {
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		case tt.want == nil && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want == nil && (got.Changes != tt.changes || (got.Batch == nil) != (tt.batch == nil) || got.Batch != nil && *got.Batch != *tt.batch):
			t.Errorf("%s: %+v (batch %+v), want changes %v batch %+v", tt.name, got, got.Batch, tt.changes, tt.batch)
		}
		if tt.want != nil && errors.Is(err, ErrNoCapabilities) && (errors.Is(err, ErrStatus) || errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: %v is both none and worth retrying", tt.name, err)
		}
	}

	// No answer at all: worth retrying, not "none".
	rm = newRemote(t, reply(200, `{}`))
	c = newClient(t, rm, Config{})
	rm.Close()
	if _, err := c.Capabilities(context.Background(), "alice.1"); err == nil || errors.Is(err, ErrNoCapabilities) {
		t.Fatalf("unreachable remote: %v", err)
	}
}

// TestCapabilitiesOfReferenceServer: the reference server advertises
// its batch route with its own limits, and its feed.
func TestCapabilitiesOfReferenceServer(t *testing.T) {
	t.Parallel()
	srv, err := refserver.New(refserver.Config{DataDir: t.TempDir(), DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	c := newClient(t, nil, Config{BaseURL: hs.URL})
	got, err := c.Capabilities(t.Context(), "alice.1")
	if err != nil {
		t.Fatal(err)
	}
	want := BatchCapability{idempotency.DefaultBatchMaxOperations, idempotency.DefaultBatchMaxBytes, true}
	if !got.Changes || got.Batch == nil || *got.Batch != want {
		t.Fatalf("capabilities %+v (batch %+v), want changes and %+v", got, got.Batch, want)
	}
}

// TestBatchItemBytes: the sizes BatchItemBytes and BatchEnvelopeBytes
// give add up to the exact body SendBatch sends, whatever the ids, data
// and base path hold.
func TestBatchItemBytes(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{"results":[]}`))
	for _, base := range []string{"", "/app/x%20y"} {
		c := newClient(t, rm, Config{BaseURL: rm.URL + base, Routes: map[string]Routes{
			"by-client": {Update: Route{Method: "PUT", Path: "/v2/{type}/{clientId}"}},
		}})
		odd := createReq()
		odd.OperationID, odd.EntityID = "op-odd", `a/b c:@+,;=$&'()*!é"\<>`
		odd.Data = []byte(`{ "html": "<b>&amp;</b>", "u": "\u00e9\n" }`)
		byClient := updateReq()
		byClient.OperationID, byClient.EntityType, byClient.ServerID = "op-bc", "by-client", ""
		unbuildable := updateReq()
		unbuildable.OperationID, unbuildable.ServerID = "op-nosrv", ""
		for _, rs := range [][]Request{
			{createReq()},
			{createReq(), updateReq(), deleteReq()},
			{odd, byClient, unbuildable, deleteReq()},
		} {
			before := len(rm.requests())
			if _, err := c.SendBatch(context.Background(), rs); err != nil {
				t.Fatal(err)
			}
			sent := rm.requests()[before]
			want, n := BatchEnvelopeBytes, 0
			for _, r := range rs {
				if b := c.BatchItemBytes(r); b > 0 {
					if n > 0 {
						want++
					}
					want += b
					n++
				}
			}
			if len(sent.Body) != want {
				t.Fatalf("base %q, %d requests: sent %d bytes, sized %d: %s", base, len(rs), len(sent.Body), want, sent.Body)
			}
		}
	}
}

// FuzzParseCapabilities: whatever the remote answers, reading it never
// panics, and what it accepts is a usable advertisement.
func FuzzParseCapabilities(f *testing.F) {
	for _, s := range []string{
		`{"batch":{"maxOperations":100,"maxBytes":8388608},"changes":true}`,
		`{"changes":true}`, `{"batch":null}`, `{"batch":{"maxOperations":1e3,"maxBytes":1.0e6}}`,
		`[]`, `{}`, `{"batch":{}}`, `{"changes":"yes"}`, `{"batch":{"maxOperations":-1,"maxBytes":1}}`,
		`{"batch":{"maxOperations":1e400,"maxBytes":1}}`, ` {"changes":false} `, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		caps, err := ParseCapabilities(body)
		if err != nil {
			return
		}
		if b := caps.Batch; b != nil && (b.MaxOperations <= 0 || b.MaxBytes <= 0) {
			t.Fatalf("%s: accepted limits %+v", body, b)
		}
	})
}
