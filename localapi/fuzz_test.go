package localapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	"github.com/syncd/syncd/queue"
)

// The fuzz targets of the local API's request parsing. Their seed
// corpora run in every `go test`; docs/localapi.md ("Fuzzing") has the
// longer run.

// FuzzDecodeObject: the body parser never panics, and what it accepts is
// one JSON object with only the allowed members, that every JSON reader
// takes the same way (jsonstrict), nested at most MaxJSONDepth.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","data":{}}`, `{"data":[1]}`, `{`, `null`, `{"data":{}} {}`, `{"Data":1}`, `"x"`, ``,
		`{"id":"a","id":"b","data":{}}`, `{"data":{"a":1,"a":2}}`, `{"data":{"\u0061":1,"a":2}}`,
		"{\"data\":{\"\xff\":1,\"\xfe\":2}}", `{"data":{"a":"\ud800"}}`, `{"data":{"a":"\udc00\ud800"}}`,
		`{"data":` + strings.Repeat(`[`, 130) + strings.Repeat(`]`, 130) + `}`,
		`{"data":{"n":1e400,"s":"\u0000"}}`, ` {"data" : { } } `, `{"id":"..","data":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var id string
		var data json.RawMessage
		err := decodeObject(body, &field{name: "id", dst: &id}, &field{name: "data", dst: &data, required: true})
		if err != nil {
			ae, ok := err.(*apiError)
			if !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			if ae.status != http.StatusBadRequest || (ae.code != CodeInvalidJSON && ae.code != CodeInvalidRequest) || ae.message == "" {
				t.Fatalf("refused with %d %s %q", ae.status, ae.code, ae.message)
			}
			return
		}
		if err := jsonstrict.Check(body, MaxJSONDepth); err != nil {
			t.Fatalf("accepted a body jsonstrict refuses (%v): %q", err, body)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || m == nil {
			t.Fatalf("accepted a body that is not a JSON object: %q", body)
		}
		for k := range m {
			if k != "id" && k != "data" {
				t.Fatalf("accepted member %q", k)
			}
		}
		if len(data) == 0 {
			t.Fatal("accepted without data")
		}
	})
}

// fuzzServer is a server over fakes whose reads find nothing.
func fuzzServer(t testing.TB) *Server {
	s, err := New(Config{Daemon: &fakeDaemon{account: "alice"}, Store: fakeStore{err: queue.ErrEntityNotFound}, Bus: fakeBus{err: daemon.ErrBusClosed}, Token: testToken, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fuzzServe sends one request to s in memory. path is sent as given
// (already escaped).
func fuzzServe(s *Server, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://127.0.0.1:7419/", strings.NewReader(body))
	u, err := url.Parse("http://127.0.0.1:7419" + path)
	if err != nil {
		return nil
	}
	r.URL, r.RequestURI = u, u.RequestURI()
	r.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	return w
}

// checkAnswer checks what every answer must be: not a 5xx, and an
// error with a code and a message.
func checkAnswer(t *testing.T, what string, w *httptest.ResponseRecorder) errorBody {
	t.Helper()
	var body errorBody
	if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
		t.Fatalf("%s: %d %s", what, w.Code, w.Body)
	}
	if w.Code >= 400 {
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
			t.Fatalf("%s: %d without an error code and message: %s", what, w.Code, w.Body)
		}
	}
	return body
}

// FuzzQuery: query parameters (since, limit, after, state, syncState,
// type, policy, force, ...) on every route that takes some never make a
// 500 or a panic, only an answer or a 4xx with a code. An absurd since
// is not refused: it means a resync (the fake bus answers 503
// shutting_down once the parameters passed).
func FuzzQuery(f *testing.F) {
	for _, q := range []string{
		"", "limit=10", "limit=0", "limit=-1", "limit=1001", "limit=99999999999999999999", "limit=1&limit=2",
		"after=n1", "after=..", "after=.", "after=a%20b", "after=%ff", "syncState=pending", "syncState=done",
		"state=retry_waiting", "state=failed", "account=alice", "account=a%00b",
		"since=0", "since=18446744073709551615", "since=18446744073709551616", "since=-1", "since=1e3", "since=%20",
		"type=entity.,operation.", "type=" + strings.Repeat("a,", 40), "entityType=note", "entityType=..",
		"policy=purge&force=true", "policy=wipe", "force=maybe", "%zz", "a=1;b=2", "token=x",
	} {
		f.Add(q)
	}
	s := fuzzServer(f)
	ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	f.Fuzz(func(t *testing.T, q string) {
		if strings.ContainsAny(q, "# \r\n") {
			return // not a query string a client can send
		}
		for _, rt := range []struct {
			method, path string
			header       map[string]string
		}{
			{"GET", "/v1/entities/note", nil},
			{"GET", "/v1/operations", nil},
			{"GET", "/v1/events", ws},
			{"DELETE", "/v1/session", nil},
			{"GET", "/v1/status", nil},
		} {
			w := fuzzServe(s, rt.method, rt.path+"?"+q, "", rt.header)
			if w == nil {
				return
			}
			body := checkAnswer(t, rt.method+" "+rt.path+"?"+q, w)
			if rt.path == "/v1/events" && w.Code == http.StatusServiceUnavailable && body.Error.Code != CodeShuttingDown {
				t.Fatalf("events?%s: %d %s", q, w.Code, body.Error.Code)
			}
			if v, err := url.ParseQuery(q); err == nil && rt.path == "/v1/events" && len(v) == 1 && len(v["since"]) == 1 {
				if _, err := strconv.ParseUint(v.Get("since"), 10, 64); err == nil && w.Code == http.StatusBadRequest {
					t.Fatalf("since=%s refused: %s", v.Get("since"), body.Error.Message)
				}
			}
		}
	})
}

// FuzzIDs: an entity or operation id, in a path, a body or an
// Idempotency-Key, is accepted exactly when it is a valid id other than
// "." and ".."; otherwise the answer is 400 invalid_request. Never a 5xx.
func FuzzIDs(f *testing.F) {
	for _, id := range []string{"n1", ".", "..", "...", "a/b", "a b", "", strings.Repeat("i", 128), strings.Repeat("i", 129), "ü", "%2E", "a\x00", "-", "~", "\x7f"} {
		f.Add(id)
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, id string) {
		valid := validID(id, queue.ValidateEntityID) == nil
		validOp := validID(id, queue.ValidateOperationID) == nil
		esc := url.PathEscape(id)
		if id == "." || id == ".." {
			esc = strings.Repeat("%2E", len(id))
		}
		idJSON, _ := json.Marshal(id)
		checks := []struct {
			what  string
			w     *httptest.ResponseRecorder
			valid bool
		}{
			{"GET entity", fuzzServe(s, "GET", "/v1/entities/note/"+esc, "", nil), valid},
			{"PATCH entity", fuzzServe(s, "PATCH", "/v1/entities/note/"+esc, `{"data":{}}`, nil), valid},
			{"GET operation", fuzzServe(s, "GET", "/v1/operations/"+esc, "", nil), validOp},
			{"POST entity id", fuzzServe(s, "POST", "/v1/entities/note", `{"id":`+string(idJSON)+`,"data":{}}`, nil), valid},
		}
		if !strings.ContainsAny(id, "\r\n\x00") {
			checks = append(checks, struct {
				what  string
				w     *httptest.ResponseRecorder
				valid bool
			}{"Idempotency-Key", fuzzServe(s, "POST", "/v1/entities/note", `{"data":{}}`, map[string]string{"Idempotency-Key": id}), validOp})
		}
		for _, c := range checks {
			if c.w == nil {
				continue
			}
			body := checkAnswer(t, c.what+" "+strconv.Quote(id), c.w)
			refused := c.w.Code == http.StatusBadRequest && body.Error.Code == CodeInvalidRequest
			if c.valid && refused {
				t.Fatalf("%s %q: a valid id refused: %s", c.what, id, body.Error.Message)
			}
			if !c.valid && !refused && c.w.Code != http.StatusNotFound {
				t.Fatalf("%s %q: an invalid id answered %d %s", c.what, id, c.w.Code, c.w.Body)
			}
		}
	})
}
