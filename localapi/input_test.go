package localapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncd/syncd/queue"
)

// TestBadInput sends every kind of bad request and checks its status and
// code, and that the queue (change log, operation counts, session) is
// exactly as it was.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{
		account: "alice",
		cfg:     Config{EntityTypes: []string{"note", "task"}, MaxBodyBytes: 64 << 10},
		qcfg:    queue.Config{MaxDataBytes: 4 << 10},
	})
	created := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{"title":"a"}}`})
	pendingOp := created.str("operationId")
	const valid = `{"data":{"title":"x"}}`
	ct := func(v string) map[string]string { return map[string]string{"Content-Type": v} }
	key := func(v string) map[string]string { return map[string]string{"Idempotency-Key": v} }

	tests := []struct {
		name       string
		rq         req
		wantStatus int
		wantCode   string
		wantInMsg  string
	}{
		// The body.
		{"broken JSON", req{method: "POST", path: "/v1/entities/note", body: `{"data":`}, 400, CodeInvalidJSON, "not complete JSON"},
		{"not JSON", req{method: "POST", path: "/v1/entities/note", body: `hello`}, 400, CodeInvalidJSON, "not valid JSON"},
		{"empty body", req{method: "POST", path: "/v1/entities/note", header: ct("application/json")}, 400, CodeInvalidJSON, "empty"},
		{"array body", req{method: "POST", path: "/v1/entities/note", body: `[{"data":{}}]`}, 400, CodeInvalidJSON, "object"},
		{"null body", req{method: "POST", path: "/v1/entities/note", body: `null`}, 400, CodeInvalidJSON, "null"},
		{"trailing object", req{method: "POST", path: "/v1/entities/note", body: valid + ` {}`}, 400, CodeInvalidJSON, "after"},
		{"trailing garbage", req{method: "POST", path: "/v1/entities/note", body: valid + `x`}, 400, CodeInvalidJSON, "after"},
		{"unknown field", req{method: "POST", path: "/v1/entities/note", body: `{"data":{},"extra":1}`}, 400, CodeInvalidRequest, `"extra"`},
		{"field in other case", req{method: "POST", path: "/v1/entities/note", body: `{"Data":{}}`}, 400, CodeInvalidRequest, `"Data"`},
		{"missing data", req{method: "POST", path: "/v1/entities/note", body: `{"id":"n9"}`}, 400, CodeInvalidRequest, `"data" is required`},
		{"array data", req{method: "POST", path: "/v1/entities/note", body: `{"data":[1]}`}, 400, CodeInvalidRequest, `"data" must be a JSON object`},
		{"string data", req{method: "POST", path: "/v1/entities/note", body: `{"data":"x"}`}, 400, CodeInvalidRequest, `"data"`},
		{"null data", req{method: "POST", path: "/v1/entities/note", body: `{"data":null}`}, 400, CodeInvalidRequest, `"data"`},
		{"number id", req{method: "POST", path: "/v1/entities/note", body: `{"id":5,"data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"id with space", req{method: "POST", path: "/v1/entities/note", body: `{"id":"a b","data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"empty id", req{method: "POST", path: "/v1/entities/note", body: `{"id":"","data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"id .", req{method: "POST", path: "/v1/entities/note", body: `{"id":".","data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"id ..", req{method: "POST", path: "/v1/entities/note", body: `{"id":"..","data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"id .. escaped", req{method: "POST", path: "/v1/entities/note", body: `{"id":"\u002e\u002e","data":{}}`}, 400, CodeInvalidRequest, `"id"`},

		// JSON that readers would take in different ways.
		{"duplicate id", req{method: "POST", path: "/v1/entities/note", body: `{"id":"a","id":"b","data":{}}`}, 400, CodeInvalidJSON, "duplicate"},
		{"duplicate by escape", req{method: "POST", path: "/v1/entities/note", body: `{"id":"a","\u0069d":"b","data":{}}`}, 400, CodeInvalidJSON, "duplicate"},
		{"duplicate in data", req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":1,"a":2}}`}, 400, CodeInvalidJSON, "duplicate"},
		{"invalid UTF-8 names", req{method: "POST", path: "/v1/entities/note", body: "{\"data\":{\"\xff\":1,\"\xfe\":2}}"}, 400, CodeInvalidJSON, "UTF-8"},
		{"invalid UTF-8 value", req{method: "POST", path: "/v1/entities/note", body: "{\"data\":{\"a\":\"\xc3\x28\"}}"}, 400, CodeInvalidJSON, "UTF-8"},
		{"lone surrogate", req{method: "POST", path: "/v1/entities/note", body: `{"data":{"a":"\ud800"}}`}, 400, CodeInvalidJSON, "surrogate"},
		{"too deep", req{method: "POST", path: "/v1/entities/note", body: `{"data":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200) + `}`}, 400, CodeInvalidJSON, "deep"},
		{"patch with duplicates", req{method: "PATCH", path: "/v1/entities/note/n1", body: `{"data":{"title":null,"title":"x"}}`}, 400, CodeInvalidJSON, "duplicate"},
		{"patch too deep", req{method: "PATCH", path: "/v1/entities/note/n1", body: `{"data":` + strings.Repeat(`[`, 200) + strings.Repeat(`]`, 200) + `}`}, 400, CodeInvalidJSON, "deep"},
		{"session with duplicate account", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accountId":"alice","accessToken":"t"}`}, 400, CodeInvalidJSON, "duplicate"},
		{"text/plain", req{method: "POST", path: "/v1/entities/note", body: valid, header: ct("text/plain")}, 415, CodeUnsupportedMediaType, "application/json"},
		{"no content type", req{method: "POST", path: "/v1/entities/note", body: valid, header: ct("")}, 415, CodeUnsupportedMediaType, "application/json"},
		{"form content type", req{method: "POST", path: "/v1/entities/note", body: valid, header: ct("application/x-www-form-urlencoded")}, 415, CodeUnsupportedMediaType, ""},
		{"body over the limit", req{method: "POST", path: "/v1/entities/note", body: `{"data":{"x":"` + strings.Repeat("a", 64<<10) + `"}}`}, 413, CodeBodyTooLarge, "larger than"},
		{"data over the queue's limit", req{method: "POST", path: "/v1/entities/note", body: `{"data":{"x":"` + strings.Repeat("a", 5<<10) + `"}}`}, 400, CodeInvalidRequest, "limit"},
		{"patch over the queue's limit", req{method: "PATCH", path: "/v1/entities/note/n1", body: `{"data":{"x":"` + strings.Repeat("a", 5<<10) + `"}}`}, 400, CodeInvalidRequest, "limit"},

		// The path.
		{"invalid entity type", req{method: "POST", path: "/v1/entities/no!te", body: valid}, 400, CodeInvalidRequest, "entity type"},
		{"overlong entity type", req{method: "POST", path: "/v1/entities/" + strings.Repeat("n", 65), body: valid}, 400, CodeInvalidRequest, "entity type"},
		{"unknown entity type", req{method: "POST", path: "/v1/entities/invoice", body: valid}, 404, CodeUnknownEntityType, "invoice"},
		{"unknown entity type read", req{method: "GET", path: "/v1/entities/invoice/n1"}, 404, CodeUnknownEntityType, ""},
		{"unknown entity type list", req{method: "GET", path: "/v1/entities/invoice"}, 404, CodeUnknownEntityType, ""},
		{"overlong entity id", req{method: "PATCH", path: "/v1/entities/note/" + strings.Repeat("i", 129), body: valid}, 400, CodeInvalidRequest, "entity id"},
		{"entity id %2E%2E", req{method: "PATCH", path: "/v1/entities/note/%2E%2E", body: valid}, 400, CodeInvalidRequest, ".."},
		{"entity id %2E", req{method: "GET", path: "/v1/entities/note/%2e"}, 400, CodeInvalidRequest, "."},
		{"operation id %2E%2E", req{method: "POST", path: "/v1/operations/%2E%2E/retry"}, 400, CodeInvalidRequest, ".."},
		{"patch of a missing entity", req{method: "PATCH", path: "/v1/entities/note/nope", body: valid}, 404, CodeNotFound, ""},
		{"delete of a missing entity", req{method: "DELETE", path: "/v1/entities/note/nope"}, 404, CodeNotFound, ""},
		{"get of a missing entity", req{method: "GET", path: "/v1/entities/note/nope"}, 404, CodeNotFound, ""},
		{"create of a taken id", req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{}}`}, 409, CodeEntityExists, ""},
		{"patch with array data", req{method: "PATCH", path: "/v1/entities/note/n1", body: `{"data":[]}`}, 400, CodeInvalidRequest, `"data"`},
		{"patch with an id", req{method: "PATCH", path: "/v1/entities/note/n1", body: `{"id":"n2","data":{}}`}, 400, CodeInvalidRequest, `"id"`},
		{"delete with a body", req{method: "DELETE", path: "/v1/entities/note/n1", body: `{}`}, 400, CodeInvalidRequest, "no request body"},

		// Query parameters.
		{"bad syncState", req{method: "GET", path: "/v1/entities/note?syncState=done"}, 400, CodeInvalidRequest, "syncState"},
		{"limit 0", req{method: "GET", path: "/v1/entities/note?limit=0"}, 400, CodeInvalidRequest, "limit"},
		{"negative limit", req{method: "GET", path: "/v1/entities/note?limit=-1"}, 400, CodeInvalidRequest, "limit"},
		{"limit not a number", req{method: "GET", path: "/v1/entities/note?limit=ten"}, 400, CodeInvalidRequest, "limit"},
		{"limit too large", req{method: "GET", path: "/v1/entities/note?limit=1001"}, 400, CodeInvalidRequest, "limit"},
		{"misspelt filter", req{method: "GET", path: "/v1/entities/note?sync_state=pending"}, 400, CodeInvalidRequest, "sync_state"},
		{"repeated parameter", req{method: "GET", path: "/v1/entities/note?limit=1&limit=2"}, 400, CodeInvalidRequest, "limit"},
		{"bad entity cursor", req{method: "GET", path: "/v1/entities/note?after=a%20b"}, 400, CodeInvalidRequest, "after"},
		{"entity cursor ..", req{method: "GET", path: "/v1/entities/note?after=.."}, 400, CodeInvalidRequest, "after"},
		{"bad state", req{method: "GET", path: "/v1/operations?state=failed"}, 400, CodeInvalidRequest, "state"},
		{"bad operation cursor", req{method: "GET", path: "/v1/operations?after=abc"}, 400, CodeInvalidRequest, "after"},
		{"bad operations limit", req{method: "GET", path: "/v1/operations?limit=0"}, 400, CodeInvalidRequest, "limit"},
		{"query on get", req{method: "GET", path: "/v1/entities/note/n1?x=1"}, 400, CodeInvalidRequest, `"x"`},
		{"query on status", req{method: "GET", path: "/v1/status?verbose=1"}, 400, CodeInvalidRequest, ""},
		{"query on create", req{method: "POST", path: "/v1/entities/note?bogus=1", body: `{"data":{}}`}, 400, CodeInvalidRequest, `"bogus"`},
		{"query on patch", req{method: "PATCH", path: "/v1/entities/note/n1?bogus=1", body: `{"data":{}}`}, 400, CodeInvalidRequest, `"bogus"`},
		{"query on delete", req{method: "DELETE", path: "/v1/entities/note/n1?bogus=1"}, 400, CodeInvalidRequest, `"bogus"`},

		// Idempotency-Key.
		{"key with space", req{method: "POST", path: "/v1/entities/note", body: valid, header: key("a b")}, 400, CodeInvalidRequest, "Idempotency-Key"},
		{"key with slash", req{method: "POST", path: "/v1/entities/note", body: valid, header: key("a/b")}, 400, CodeInvalidRequest, "Idempotency-Key"},
		{"overlong key", req{method: "POST", path: "/v1/entities/note", body: valid, header: key(strings.Repeat("k", 129))}, 400, CodeInvalidRequest, "Idempotency-Key"},
		{"key .", req{method: "POST", path: "/v1/entities/note", body: valid, header: key(".")}, 400, CodeInvalidRequest, "Idempotency-Key"},
		{"key ..", req{method: "POST", path: "/v1/entities/note", body: valid, header: key("..")}, 400, CodeInvalidRequest, "Idempotency-Key"},
		{"key of another request", req{method: "POST", path: "/v1/entities/note", body: valid, header: key(pendingOp)}, 422, CodeKeyReused, ""},

		// Session.
		{"session without token", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"session with empty token", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":""}`}, 400, CodeInvalidRequest, "accessToken"},
		{"session with bad account", req{method: "PUT", path: "/v1/session", body: `{"accountId":"b o b","accessToken":"t"}`}, 400, CodeInvalidRequest, "account"},
		{"session with number token", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":1}`}, 400, CodeInvalidRequest, "accessToken"},
		{"session with unknown field", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"t","refresh":"r"}`}, 400, CodeInvalidRequest, "refresh"},
		// A token net/http cannot send, or one no server reads as sent.
		{"token with a newline", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a.dev\n"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with CRLF", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a\r\nX-Evil: 1"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with NUL", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a\u0000b"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with DEL", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a\u007fb"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with a tab", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a\tb"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with a space", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"a b"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"token with a trailing space", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"ab "}`}, 400, CodeInvalidRequest, "accessToken"},
		{"non-ASCII token", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"tök"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"overlong token", req{method: "PUT", path: "/v1/session", body: `{"accountId":"bob","accessToken":"` + strings.Repeat("t", 8193) + `"}`}, 400, CodeInvalidRequest, "accessToken"},
		{"logout with bad policy", req{method: "DELETE", path: "/v1/session?policy=wipe"}, 400, CodeInvalidRequest, "policy"},
		{"logout with bad force", req{method: "DELETE", path: "/v1/session?policy=purge&force=maybe"}, 400, CodeInvalidRequest, "force"},
		{"purge with unsynced operations", req{method: "DELETE", path: "/v1/session?policy=purge"}, 409, CodeNotPurgeable, ""},

		// Operations.
		{"retry of a missing operation", req{method: "POST", path: "/v1/operations/nope/retry"}, 404, CodeNotFound, ""},
		{"discard of a missing operation", req{method: "POST", path: "/v1/operations/nope/discard"}, 404, CodeNotFound, ""},
		{"get of a missing operation", req{method: "GET", path: "/v1/operations/nope"}, 404, CodeNotFound, ""},
		{"retry of a pending operation", req{method: "POST", path: "/v1/operations/" + pendingOp + "/retry"}, 409, CodeIllegalTransition, "permanently failed"},
		{"discard of a pending operation", req{method: "POST", path: "/v1/operations/" + pendingOp + "/discard"}, 409, CodeIllegalTransition, "permanently failed"},
		{"retry with a body", req{method: "POST", path: "/v1/operations/" + pendingOp + "/retry", body: `{}`}, 400, CodeInvalidRequest, "no request body"},
	}
	before := e.snapshot()
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := e.do(tt.rq)
				if r.status != tt.wantStatus || r.code() != tt.wantCode {
					t.Fatalf("status %d code %q, want %d %q: %s", r.status, r.code(), tt.wantStatus, tt.wantCode, r.raw)
				}
				if !strings.Contains(r.message(), tt.wantInMsg) {
					t.Errorf("message %q does not mention %q", r.message(), tt.wantInMsg)
				}
			})
		}
	})
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("refused requests wrote to the queue: before %+v, after %+v", before, after)
	}
	got := e.must(200, req{method: "GET", path: "/v1/entities/note/n1"})
	jsonEq(t, got.body["data"], `{"title":"a"}`)
}

// TestChunkedBodyOverLimit sends an oversized body without a
// Content-Length, so only the reader's limit can stop it.
func TestChunkedBodyOverLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice", cfg: Config{MaxBodyBytes: 1 << 10}})
	before := e.snapshot()
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"data":{"x":"` + strings.Repeat("a", 4<<10) + `"}}`))
		pw.Close()
	}()
	hr, _ := http.NewRequest("POST", e.url+"/v1/entities/note", pr)
	hr.Header.Set("Authorization", "Bearer "+testToken)
	hr.Header.Set("Content-Type", "application/json")
	res, err := e.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body errorBody
	json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != 413 || body.Error.Code != CodeBodyTooLarge {
		t.Fatalf("status %d code %q, want 413 %s", res.StatusCode, body.Error.Code, CodeBodyTooLarge)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("wrote: before %+v after %+v", before, after)
	}
}

func TestNoSession(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	before := e.snapshot()
	for _, rq := range []req{
		{method: "POST", path: "/v1/entities/note", body: `{"data":{}}`},
		{method: "POST", path: "/v1/entities/note", body: `{"data":{}}`, header: map[string]string{"Idempotency-Key": "k1"}},
		{method: "PATCH", path: "/v1/entities/note/n1", body: `{"data":{}}`},
		{method: "DELETE", path: "/v1/entities/note/n1"},
		{method: "GET", path: "/v1/entities/note/n1"},
		{method: "GET", path: "/v1/entities/note"},
		{method: "DELETE", path: "/v1/session"},
	} {
		if r := e.do(rq); r.status != 409 || r.code() != CodeNoSession {
			t.Errorf("%s %s signed out: status %d code %q, want 409 %s", rq.method, rq.path, r.status, r.code(), CodeNoSession)
		}
	}
	// Bad input is still bad input when signed out.
	if r := e.do(req{method: "POST", path: "/v1/entities/note", body: `{`}); r.code() != CodeInvalidJSON {
		t.Errorf("bad JSON signed out: %s", r.raw)
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Errorf("wrote: before %+v after %+v", before, after)
	}
}
