package remote

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzEntityBodies: the bodies of the reference server's writes. A
// create's and an update's body is refused 400 unless it is exactly one
// JSON object (nothing after it); what is accepted is written as sent
// (the data compacted, the clientId as given, version 1 for a new
// record and +1 for an update); an update's baseVersion refuses it
// (409, policy reject) exactly when it is below the record's version;
// and a delete's baseVersion means the same in the query and in the
// body. The list of every target is in docs/fuzzing.md.
func FuzzEntityBodies(f *testing.F) {
	for _, s := range []struct {
		create, update string
		base           int64
	}{
		{`{"clientId":"c","data":{"a":1},"payloadVersion":2}`, `{"data":{"a":2},"baseVersion":1}`, 1},
		{`{"clientId":"c","data":{ "a" : [1, 2] }}`, `{"data":{"a":2},"baseVersion":0}`, 0},
		{`{"clientId":"","data":{}}`, `{"data":{},"baseVersion":-5}`, -5},
		{`{"clientId":"c","data":[]}`, `{"data":{},"baseVersion":null}`, 2},
		{`{"clientId":"c","data":{}}]`, `{"data":{}}}`, 9223372036854775807},
		{`{"clientId":"c","data":{}} {}`, `{"data":{}} x`, -9223372036854775808},
		{`{"clientId":"c","data":{"invalid":true}}`, `{"data":{},"baseVersion":1.5}`, 1},
		{`null`, `{"data":{},"baseVersion":"1"}`, 1},
		{`{"clientId":"` + strings.Repeat("x", 256) + `","data":{}}`, `{"data":{"a":"\ud800"}}`, 1},
	} {
		f.Add([]byte(s.create), []byte(s.update), s.base)
	}
	srv, err := New(Config{Path: filepath.Join(f.TempDir(), "remote.db"), DevTokens: true, RejectConflicts: []string{"notes"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	h := srv.Handler()
	n := 0
	do := func(t *testing.T, method, path string, body []byte) (int, []byte) {
		t.Helper()
		n++
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "fuzz-"+strconv.Itoa(n))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	record := func(t *testing.T, answer []byte) Entity {
		t.Helper()
		var e Entity
		if err := json.Unmarshal(answer, &e); err != nil || e.ID == "" {
			t.Fatalf("answer %s is no record: %v", answer, err)
		}
		return e
	}
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		json.Compact(&b, raw)
		return b.String()
	}
	oneObject := func(body []byte) bool {
		var obj map[string]json.RawMessage
		return json.Unmarshal(body, &obj) == nil && obj != nil
	}
	fresh := func(t *testing.T) Entity {
		t.Helper()
		st, ans := do(t, "POST", "/v1/notes", []byte(`{"clientId":"base-`+strconv.Itoa(n)+`","data":{"b":1}}`))
		if st != http.StatusCreated {
			t.Fatalf("create: %d %s", st, ans)
		}
		return record(t, ans)
	}
	f.Fuzz(func(t *testing.T, create, update []byte, base int64) {
		// A create.
		st, ans := do(t, "POST", "/v1/notes", create)
		var sent createRequest
		switch st {
		case http.StatusCreated, http.StatusOK:
			if !oneObject(create) || json.Unmarshal(create, &sent) != nil {
				t.Fatalf("create %q accepted (%d)", create, st)
			}
			e := record(t, ans)
			if e.ClientID != sent.ClientID || st == http.StatusCreated && (e.Version != 1 || string(e.Data) != compact(sent.Data)) {
				t.Fatalf("create %q answered %d %s", create, st, ans)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("create %q answered %d %s", create, st, ans)
		}

		// An update of a record at version 1.
		e := fresh(t)
		var upd updateRequest
		st, ans = do(t, "PATCH", "/v1/notes/"+e.ID, update)
		switch st {
		case http.StatusOK, http.StatusConflict:
			if !oneObject(update) || json.Unmarshal(update, &upd) != nil {
				t.Fatalf("update %q accepted (%d)", update, st)
			}
			conflict := upd.BaseVersion != nil && *upd.BaseVersion < 1
			if conflict != (st == http.StatusConflict) {
				t.Fatalf("update %q of version 1 answered %d", update, st)
			}
			if upd.BaseVersion != nil && *upd.BaseVersion < 0 {
				t.Fatalf("update %q with a negative baseVersion answered %d", update, st)
			}
			if st == http.StatusConflict {
				var c struct{ Current Entity }
				if json.Unmarshal(ans, &c) != nil || c.Current.ID != e.ID || c.Current.Version != 1 {
					t.Fatalf("update %q answered %s", update, ans)
				}
			} else if got := record(t, ans); got.Version != 2 || string(got.Data) != compact(upd.Data) {
				t.Fatalf("update %q answered %s", update, ans)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("update %q answered %d %s", update, st, ans)
		}

		// A delete's baseVersion, in the query and in the body.
		a, b := fresh(t), fresh(t)
		q := strconv.FormatInt(base, 10)
		stQ, ansQ := do(t, "DELETE", "/v1/notes/"+a.ID+"?baseVersion="+q, nil)
		stB, ansB := do(t, "DELETE", "/v1/notes/"+b.ID, []byte(`{"baseVersion":`+q+`}`))
		if stQ != stB {
			t.Fatalf("baseVersion %s: %d %s in the query, %d %s in the body", q, stQ, ansQ, stB, ansB)
		}
		if want := map[bool]int{true: http.StatusConflict, false: http.StatusOK}[base < 1]; base >= 0 && stQ != want {
			t.Fatalf("delete of version 1 at baseVersion %s answered %d", q, stQ)
		}
	})
}

// What FuzzEntityBodies found: a body with a stray ']' or '}' after its
// object was taken, and a negative baseVersion in a body was taken as a
// version (a 409 under policy reject) where the query refuses it.
func TestEntityBodyFindings(t *testing.T) {
	t.Parallel()
	h := setup(t, Config{Path: filepath.Join(t.TempDir(), "remote.db"), RejectConflicts: []string{"notes"}})
	res, err := h.do("POST", "/v1/notes", "alice", "k1", `{"clientId":"c1","data":{}}`)
	if err != nil || res.status != http.StatusCreated {
		t.Fatalf("create: %v %+v", err, res)
	}
	var e Entity
	json.Unmarshal([]byte(res.body), &e)
	for i, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/notes", `{"clientId":"c2","data":{}}]`},
		{"POST", "/v1/notes", `{"clientId":"c2","data":{}}}`},
		{"PATCH", "/v1/notes/" + e.ID, `{"data":{}}]`},
		{"PATCH", "/v1/notes/" + e.ID, `{"data":{},"baseVersion":-1}`},
		{"DELETE", "/v1/notes/" + e.ID, `{"baseVersion":-1}`},
	} {
		res, err := h.do(tc.method, tc.path, "alice", "k-"+strconv.Itoa(i+2), tc.body)
		if err != nil || res.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: %v %d %s, want 400", tc.method, tc.path, tc.body, err, res.status, res.body)
		}
	}
}
