package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestDefaultRoutes checks method, path, headers and body of each
// default route.
func TestDefaultRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		req        Request
		method     string
		uri        string
		body       string // JSON, compared semantically; "" means none
		wantServer string
	}{
		{
			name:   "create",
			req:    createReq(),
			method: "POST", uri: "/v1/notes",
			body:       `{"clientId":"local-1","data":{"title":"hi"},"payloadVersion":3}`,
			wantServer: "srv-new",
		},
		{
			name:   "update",
			req:    updateReq(),
			method: "PATCH", uri: "/v1/notes/srv-1",
			body:       `{"data":{"title":"hi"},"payloadVersion":3}`,
			wantServer: "srv-1",
		},
		{
			name:   "delete",
			req:    deleteReq(),
			method: "DELETE", uri: "/v1/notes/srv-1",
			wantServer: "srv-1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rm := newRemote(t, reply(201, `{"id":"srv-new"}`))
			c := newClient(t, rm, Config{UserAgent: "syncd-test"})
			o := c.Send(t.Context(), tt.req)
			if o.Decision != Done || o.ServerID != tt.wantServer {
				t.Fatalf("got %v %q (%v), want done %q", o.Decision, o.ServerID, o.Err, tt.wantServer)
			}
			reqs := rm.requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests", len(reqs))
			}
			got := reqs[0]
			if got.Method != tt.method || got.RequestURI != tt.uri {
				t.Errorf("request %s %s, want %s %s", got.Method, got.RequestURI, tt.method, tt.uri)
			}
			checkHeaders(t, got, tt.req)
			if ua := got.Header.Get("User-Agent"); ua != "syncd-test" {
				t.Errorf("User-Agent = %q", ua)
			}
			if tt.body == "" {
				if len(got.Body) != 0 {
					t.Errorf("body = %q, want none", got.Body)
				}
				return
			}
			if ct := got.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			jsonEqual(t, got.Body, tt.body)
		})
	}
}

func checkHeaders(t *testing.T, got seen, r Request) {
	t.Helper()
	if k := got.Header.Values("Idempotency-Key"); len(k) != 1 || k[0] != r.OperationID {
		t.Errorf("Idempotency-Key = %q, want [%q]", k, r.OperationID)
	}
	if a := got.Header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+r.Token {
		t.Errorf("Authorization = %q, want [Bearer %s]", a, r.Token)
	}
}

func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("body = %s, want %s", gb, wb)
	}
}

// TestEveryRequestCarriesKeyAndToken sends operations of two accounts
// through one client and checks that each request has its own key and its
// own account's token.
func TestEveryRequestCarriesKeyAndToken(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{"id":"s"}`))
	c := newClient(t, rm, Config{})
	var sent []Request
	for i, r := range []Request{createReq(), updateReq(), deleteReq(), createReq()} {
		r.OperationID = r.OperationID + "-" + string(rune('a'+i))
		r.Token = []string{"tok-a", "tok-b"}[i%2]
		if o := c.Send(t.Context(), r); o.Decision != Done {
			t.Fatalf("send %d: %v %v", i, o.Decision, o.Err)
		}
		sent = append(sent, r)
	}
	got := rm.requests()
	if len(got) != len(sent) {
		t.Fatalf("server saw %d requests, want %d", len(got), len(sent))
	}
	for i := range got {
		checkHeaders(t, got[i], sent[i])
	}
}

// TestRouteOverrides checks per-type routes, the id field, escaping and a
// base URL with a path.
func TestRouteOverrides(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{"data":{"uuid":"u-7"},"id":"wrong"}`))
	c := newClient(t, rm, Config{
		BaseURL: rm.URL + "/app/",
		Routes: map[string]Routes{
			"tasks": {
				Create:  Route{Method: "PUT", Path: "/api/{type}/{clientId}"},
				Update:  Route{Path: "/api/tasks/by-client/{clientId}"},
				Delete:  Route{Method: "POST", Path: "/api/tasks/{serverId}/delete"},
				IDField: "data.uuid",
			},
		},
	})

	task := func(op, serverID string) Request {
		r := createReq()
		r.Op, r.EntityType, r.EntityID, r.ServerID = op, "tasks", "a/b c", serverID
		return r
	}
	// Update by client id needs no server id.
	steps := []struct {
		req      Request
		method   string
		uri      string
		serverID string
	}{
		{task(OpCreate, ""), "PUT", "/app/api/tasks/a%2Fb%20c", "u-7"},
		{task(OpUpdate, ""), "PATCH", "/app/api/tasks/by-client/a%2Fb%20c", ""},
		{task(OpDelete, "s/1"), "POST", "/app/api/tasks/s%2F1/delete", "s/1"},
		// Another type keeps the defaults, under the base path.
		{updateReq(), "PATCH", "/app/v1/notes/srv-1", "srv-1"},
	}
	for i, s := range steps {
		o := c.Send(t.Context(), s.req)
		if o.Decision != Done || o.ServerID != s.serverID {
			t.Fatalf("step %d: %v %q (%v), want done %q", i, o.Decision, o.ServerID, o.Err, s.serverID)
		}
		got := rm.requests()[i]
		if got.Method != s.method || got.RequestURI != s.uri {
			t.Errorf("step %d: %s %s, want %s %s", i, got.Method, got.RequestURI, s.method, s.uri)
		}
	}
	// The create body is the same shape under an override.
	jsonEqual(t, rm.requests()[0].Body, `{"clientId":"a/b c","data":{"title":"hi"},"payloadVersion":3}`)
}

func TestDotSegmentsEscaped(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{}`))
	c := newClient(t, rm, Config{})
	for _, id := range []string{".", ".."} {
		r := updateReq()
		r.ServerID = id
		if o := c.Send(t.Context(), r); o.Decision != Done {
			t.Fatalf("server id %q: %v %v", id, o.Decision, o.Err)
		}
	}
	got := rm.requests()
	if got[0].RequestURI != "/v1/notes/%2E" || got[1].RequestURI != "/v1/notes/%2E%2E" {
		t.Errorf("URIs %q %q", got[0].RequestURI, got[1].RequestURI)
	}
}

// TestNotSent covers requests stopped before the wire.
func TestNotSent(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request sent: %s %s", r.Method, r.RequestURI)
	})
	c := newClient(t, rm, Config{})
	mod := func(r Request, f func(*Request)) Request { f(&r); return r }
	tests := []struct {
		name     string
		req      Request
		decision Decision
		code     string
		err      error
	}{
		{"update without server id", mod(updateReq(), func(r *Request) { r.ServerID = "" }), Permanent, CodeMissingServerID, ErrMissingServerID},
		{"delete without server id", mod(deleteReq(), func(r *Request) { r.ServerID = "" }), Permanent, CodeMissingServerID, ErrMissingServerID},
		{"no token", mod(createReq(), func(r *Request) { r.Token = "" }), RefreshSession, CodeMissingToken, ErrMissingToken},
		{"no operation id", mod(createReq(), func(r *Request) { r.OperationID = "" }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		{"no entity id", mod(createReq(), func(r *Request) { r.EntityID = "" }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		{"no entity type", mod(createReq(), func(r *Request) { r.EntityType = "" }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		{"unknown op", mod(createReq(), func(r *Request) { r.Op = "upsert" }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		{"create without data", mod(createReq(), func(r *Request) { r.Data = nil }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		{"data not json", mod(updateReq(), func(r *Request) { r.Data = []byte(`{nope`) }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
		// A token net/http cannot send is the session's fault, not the
		// operation's: refresh it.
		{"token with newline", mod(createReq(), func(r *Request) { r.Token = "a\r\nX-Evil: 1" }), RefreshSession, CodeInvalidToken, ErrInvalidToken},
		{"token ending in newline", mod(createReq(), func(r *Request) { r.Token = "a.dev\n" }), RefreshSession, CodeInvalidToken, ErrInvalidToken},
		{"token with NUL", mod(createReq(), func(r *Request) { r.Token = "a\x00" }), RefreshSession, CodeInvalidToken, ErrInvalidToken},
		{"key with newline", mod(createReq(), func(r *Request) { r.OperationID = "a\nb" }), Permanent, CodeInvalidRequest, ErrInvalidRequest},
	}
	for _, tt := range tests {
		o := c.Send(t.Context(), tt.req)
		if o.Decision != tt.decision || o.Code != tt.code || !errors.Is(o.Err, tt.err) {
			t.Errorf("%s: got %v/%q/%v, want %v/%q/%v", tt.name, o.Decision, o.Code, o.Err, tt.decision, tt.code, tt.err)
		}
		if o.Sends != 0 || o.Status != 0 {
			t.Errorf("%s: Sends = %d, Status = %d", tt.name, o.Sends, o.Status)
		}
	}
}

func TestNewInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := map[string]Config{
		"empty base":      {},
		"relative base":   {BaseURL: "/v1"},
		"ftp base":        {BaseURL: "ftp://x"},
		"base with query": {BaseURL: "http://x/?a=1"},
		"bad method":      {BaseURL: "http://x", Routes: map[string]Routes{"t": {Create: Route{Method: "PO ST"}}}},
		"relative path":   {BaseURL: "http://x", Routes: map[string]Routes{"t": {Update: Route{Path: "v1/{type}"}}}},
		"unknown hole":    {BaseURL: "http://x", Routes: map[string]Routes{"t": {Delete: Route{Path: "/v1/{id}"}}}},
		"query in path":   {BaseURL: "http://x", Routes: map[string]Routes{"t": {Delete: Route{Path: "/v1/x?y"}}}},
		"empty id field":  {BaseURL: "http://x", Routes: map[string]Routes{"t": {IDField: "data."}}},
		"negative limit":  {BaseURL: "http://x", Timeout: -1},
	}
	for name, cfg := range tests {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestResponseBodyBounded(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(400, strings.Repeat("x", 5000)))
	c := newClient(t, rm, Config{MaxResponseBytes: 100})
	o := c.Send(t.Context(), createReq())
	if o.Decision != NeedsUserAction || len(o.Body) != 100 {
		t.Errorf("got %v with %d body bytes, want needs_user_action with 100", o.Decision, len(o.Body))
	}
}

func TestMessageBounded(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(422, `{"error":{"code":"v","message":"`+strings.Repeat("é", 3000)+`"}}`))
	c := newClient(t, rm, Config{})
	o := c.Send(t.Context(), createReq())
	if len(o.Message) > 1<<10+len("…") || !utf8.ValidString(o.Message) || o.ServerCode != "v" {
		t.Errorf("Message of %d bytes (valid UTF-8 %v), ServerCode %q", len(o.Message), utf8.ValidString(o.Message), o.ServerCode)
	}
}

// TestConcurrentSends uses one Client from many goroutines (run with
// -race): each request keeps its own key, token and body.
func TestConcurrentSends(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		w.Write([]byte(`{"id":"srv-` + r.Header.Get("Idempotency-Key") + `"}`))
	})
	c := newClient(t, rm, Config{})
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				r := createReq()
				r.OperationID = fmt.Sprintf("op-%d-%d", g, i)
				r.EntityID = "local-" + r.OperationID
				r.Token = fmt.Sprintf("tok-%d", g)
				if o := c.Send(t.Context(), r); o.Decision != Done || o.ServerID != "srv-"+r.OperationID {
					t.Errorf("%s: %v %q (%v)", r.OperationID, o.Decision, o.ServerID, o.Err)
				}
			}
		})
	}
	wg.Wait()
	got := rm.requests()
	if len(got) != workers*each {
		t.Fatalf("server saw %d requests", len(got))
	}
	for _, s := range got {
		key := s.Header.Get("Idempotency-Key")
		var g, i int
		fmt.Sscanf(key, "op-%d-%d", &g, &i)
		if tok := s.Header.Get("Authorization"); tok != fmt.Sprintf("Bearer tok-%d", g) {
			t.Errorf("%s carried %q", key, tok)
		}
		jsonEqual(t, s.Body, `{"clientId":"local-`+key+`","data":{"title":"hi"},"payloadVersion":3}`)
	}
}

// TestOwnHTTPClient: a Config.Client is used, copied, and the copy does
// not follow redirects; the caller's client is left alone.
func TestOwnHTTPClient(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/notes" {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		w.WriteHeader(201)
		w.Write([]byte(`{"id":"followed"}`))
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	c := newClient(t, rm, Config{Client: hc})
	o := c.Send(t.Context(), createReq())
	if o.Decision != Permanent || o.Code != CodeUnexpectedStatus || o.Status != http.StatusTemporaryRedirect {
		t.Errorf("got %v/%q status %d, want the redirect unfollowed", o.Decision, o.Code, o.Status)
	}
	if hc.CheckRedirect != nil {
		t.Error("the caller's http.Client was changed")
	}
	if n := len(rm.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

// The request body keeps '<', '>' and '&' as they are in the data: one
// byte each, so data that fits the local limit fits the server's.
func TestBodyKeepsHTMLCharacters(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(201, `{"id":"srv-new"}`))
	c := newClient(t, rm, Config{})
	r := createReq()
	r.Data = json.RawMessage(`{"html":"<b>&amp;</b>"}`)
	if o := c.Send(t.Context(), r); o.Decision != Done {
		t.Fatalf("got %v (%v)", o.Decision, o.Err)
	}
	if body := string(rm.requests()[0].Body); !strings.Contains(body, `"html":"<b>&amp;</b>"`) {
		t.Errorf("body %s escapes the data", body)
	}
}
