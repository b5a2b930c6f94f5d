package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The fuzz targets of the transport's reading of the server's answers:
// a write's status and body (classify), a conflict's "current", a page
// of the changes feed, a batch's results and a read of one record. The
// list of every target is in docs/fuzzing.md.

// answering is a Client whose every request is answered by fn, without
// a network.
func answering(t *testing.T, fn func(*http.Request) (int, http.Header, []byte)) *Client {
	t.Helper()
	rt := roundTrip(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		st, h, body := fn(r)
		if h == nil {
			h = http.Header{}
		}
		return &http.Response{StatusCode: st, Header: h, Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
	})
	c, err := New(Config{BaseURL: "http://remote.test/app", Client: &http.Client{Transport: rt}, MaxResponseBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return clock }
	return c
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var outcomeCodes = map[string]bool{"": true,
	CodeNetwork: true, CodeTimeout: true, CodeCanceled: true, CodeRequestTimeout: true, CodeRateLimited: true, CodeUnavailable: true,
	CodeServerError: true, CodeInFlight: true, CodeTLS: true, CodeUnauthorized: true, CodeMissingToken: true, CodeInvalidToken: true,
	CodeForbidden: true, CodeNotFound: true, CodeGone: true, CodePayloadConflict: true, CodeMissingServerID: true, CodeInvalidRequest: true,
	CodeInvalidResponse: true, CodeResponseTooLarge: true, CodeUnexpectedStatus: true, CodeValidation: true, CodeRejected: true,
	CodeVersionConflict: true, CodeDeletedOnServer: true}

// checkOutcome holds for every classified answer to r.
func checkOutcome(t *testing.T, r Request, o Outcome) {
	t.Helper()
	if strings.HasPrefix(o.Decision.String(), "Decision(") {
		t.Fatalf("no decision: %+v", o)
	}
	if !outcomeCodes[o.Code] {
		t.Fatalf("code %q is not one of the closed set", o.Code)
	}
	if (o.Decision == Done) != (o.Err == nil) || o.Decision != Done && o.Code == "" {
		t.Fatalf("decision %s with code %q and error %v", o.Decision, o.Code, o.Err)
	}
	if o.Decision == Done && (o.ServerID == "" || r.Op != OpCreate && o.ServerID != r.ServerID) {
		t.Fatalf("done with server id %q for %s of %q", o.ServerID, r.Op, r.ServerID)
	}
	if (o.Decision == Conflict) != (o.Current != nil) {
		t.Fatalf("decision %s with current %+v", o.Decision, o.Current)
	}
	if o.Current != nil {
		checkCurrent(t, o.Current)
	}
	if o.ServerVersion < 0 || o.ServerPayloadVersion != 0 && !o.OtherData || o.RetryAfter < 0 {
		t.Fatalf("server version %d, payload version %d (other data %v), retry after %v", o.ServerVersion, o.ServerPayloadVersion, o.OtherData, o.RetryAfter)
	}
	if len(o.Message) > 1<<10+len("…") || !utf8.ValidString(o.Message) {
		t.Fatalf("message of %d bytes, valid UTF-8 %v", len(o.Message), utf8.ValidString(o.Message))
	}
}

func checkCurrent(t *testing.T, cur *Current) {
	t.Helper()
	if cur.Version < 0 || cur.Deleted && cur.Data != nil {
		t.Fatalf("current %+v", cur)
	}
	var obj map[string]json.RawMessage
	if cur.Data != nil && (json.Unmarshal(cur.Data, &obj) != nil || obj == nil) {
		t.Fatalf("current data %q is not a JSON object", cur.Data)
	}
}

func fuzzRequest(op uint8) Request {
	switch op % 3 {
	case 0:
		return createReq()
	case 1:
		return updateReq()
	}
	return deleteReq()
}

// FuzzClassify: any status, body and headers of an answer to a write
// give an outcome that holds together (checkOutcome), and a write sent
// alone is classified as the same write's item of a batch answer: the
// decision table holds per item.
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		status          int
		body            string
		replayed, after string
	}{
		{201, `{"id":"srv-9","version":1}`, "", ""},
		{200, `{"id":"srv-9","data":{"title":"old"},"payloadVersion":7.0}`, "true", ""},
		{200, `{"id":7}`, "", ""},
		{200, `{"id":""}`, "", ""},
		{200, `{"version":"12"}`, "", ""},
		{200, `{"version":-3}`, "", ""},
		{409, `{"error":{"code":"version_conflict"},"current":{"version":4,"data":{"a":1}}}`, "", ""},
		{409, `{"error":{"code":"version_conflict"},"current":{"version":"x","deleted":true,"data":{"a":1}}}`, "", ""},
		{409, `{"error":{"code":"version_conflict"},"current":{"data":[1]}}`, "", ""},
		{409, `{"error":{"code":"idempotency_in_flight"}}`, "", "3"},
		{409, ``, "", ""},
		{410, `{"error":{"code":"gone"}}`, "", ""},
		{404, ``, "", ""},
		{422, `{"error":{"code":"idempotency_key_reused","message":"` + strings.Repeat("é", 700) + `"}}`, "", ""},
		{429, ``, "", "Wed, 02 Dec 2026 10:00:30 GMT"},
		{503, ``, "", "-1"},
		{302, ``, "", ""},
		{0, ``, "", ""},
		{1000, `{}`, "", ""},
	} {
		for op := range uint8(3) {
			f.Add(s.status, []byte(s.body), s.replayed, s.after, op)
		}
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, replayed, after string, op uint8) {
		if status < 100 || status > 999 {
			status = 100 + (status%900+900)%900 // net/http reads three digits
		}
		r := fuzzRequest(op)
		header := func() http.Header {
			h := http.Header{}
			if replayed != "" {
				h.Set("Idempotent-Replayed", replayed)
			}
			if after != "" {
				h.Set("Retry-After", after)
			}
			return h
		}
		c := answering(t, func(*http.Request) (int, http.Header, []byte) { return status, header(), body })
		alone := c.Send(context.Background(), r)
		checkOutcome(t, r, alone)
		if alone.Status != status {
			t.Fatalf("status %d read as %d", status, alone.Status)
		}

		// The same answer as an item of a batch. An item carries only
		// what the batch's JSON can: a JSON body, "true" as replayed, a
		// Retry-After in whole seconds.
		if !json.Valid(body) || len(bytes.TrimSpace(body)) == 0 {
			return
		}
		item := batchResult{Status: status, Body: json.RawMessage(bytes.TrimSpace(body)), Replayed: alone.Replayed}
		if n, err := strconv.Atoi(after); err == nil && n > 0 {
			item.RetryAfter = n
		} else if after != "" {
			return
		}
		ans, _ := json.Marshal(map[string]any{"results": []batchResult{item}})
		cb := answering(t, func(*http.Request) (int, http.Header, []byte) { return 200, nil, ans })
		outs, err := cb.SendBatch(context.Background(), []Request{r})
		if err != nil || len(outs) != 1 {
			t.Fatalf("SendBatch: %v, %d outcomes", err, len(outs))
		}
		b := outs[0]
		checkOutcome(t, r, b)
		if b.Decision != alone.Decision || b.Code != alone.Code || b.ServerID != alone.ServerID || b.ServerVersion != alone.ServerVersion ||
			b.Replayed != alone.Replayed || b.RetryAfter != alone.RetryAfter || b.OtherData != alone.OtherData ||
			b.ServerCode != alone.ServerCode || !reflect.DeepEqual(b.Current, alone.Current) {
			t.Fatalf("batched %+v\nalone %+v", b, alone)
		}
	})
}

// FuzzConflictCurrent: conflictCurrent never panics and gives a record
// that holds together (a version not negative, no data when deleted,
// data only a JSON object); and a record written as a server writes it
// reads back as it was.
func FuzzConflictCurrent(f *testing.F) {
	f.Add([]byte(`{"current":{"version":4,"data":{"a":1}}}`), int64(4), []byte(`{"a":1}`), false)
	f.Add([]byte(`{"current":{"version":4.0,"deleted":true,"data":{"a":1}}}`), int64(1), []byte(`{}`), true)
	f.Add([]byte(`{"current":{"version":"4","data":" {}"}}`), int64(-1), []byte(` {"a" : [1]} `), false)
	f.Add([]byte(`{"current":null}`), int64(1<<62), []byte(`[1]`), false)
	f.Add([]byte(`{"current":{"version":1e300}}`), int64(0), []byte(`null`), false)
	f.Add([]byte(`[]`), int64(9007199254740993), []byte(``), false)
	f.Fuzz(func(t *testing.T, body []byte, version int64, data []byte, deleted bool) {
		checkCurrent(t, conflictCurrent(body))

		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil || obj == nil || version < 1 {
			return
		}
		var compact bytes.Buffer
		json.Compact(&compact, data)
		rec := map[string]any{"version": version, "deleted": deleted}
		if !deleted {
			rec["data"] = json.RawMessage(compact.Bytes())
		}
		ans, _ := json.Marshal(map[string]any{"error": map[string]string{"code": ServerCodeVersionConflict}, "current": rec})
		cur := conflictCurrent(ans)
		want := &Current{Version: version, Deleted: deleted}
		if !deleted {
			want.Data = compact.Bytes()
		}
		if !reflect.DeepEqual(cur, want) {
			t.Fatalf("%s read as %+v, want %+v", ans, cur, want)
		}
	})
}

// FuzzChangesPage: any answer to a changes request is a page whose
// changes all name their type, clientId and a version of 1 or more, or
// an error of the status's kind (404 no feed, 410 expired, 401
// unauthorized); only a 200 is a page; and a page, written again as the
// server writes it, reads back the same.
func FuzzChangesPage(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"changes":[{"type":"notes","id":"s1","clientId":"c1","version":2,"data":{"a":1}}],"cursor":"7","more":false}`},
		{200, `{"changes":[{"type":"notes","id":"s1","clientId":"c1","version":3,"deleted":true}],"cursor":"7.9","more":true}`},
		{200, `{"changes":[],"cursor":""}`},
		{200, `{"changes":[{"type":"notes","clientId":"c1","version":0}],"cursor":"1"}`},
		{200, `{"changes":{},"cursor":"1"}`},
		{200, `{"changes":[]}`},
		{200, `{"items":[]}`},
		{200, `[]`},
		{404, `{"error":{"code":"cursor_expired"}}`},
		{404, ``},
		{410, ``},
		{401, ``},
		{500, `{"error":{"code":"internal","message":"x"}}`},
	} {
		f.Add(s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		status = 100 + (status%900+900)%900
		c := answering(t, func(*http.Request) (int, http.Header, []byte) { return status, nil, body })
		page, err := c.Changes(context.Background(), "tok-a", "", 10, 0)
		code, _ := errorBody(body)
		switch {
		case err == nil:
			if status != http.StatusOK {
				t.Fatalf("a page from a %d", status)
			}
		case errors.Is(err, ErrNoFeed):
			if status != http.StatusOK && status != http.StatusNotFound {
				t.Fatalf("no feed from a %d: %v", status, err)
			}
			return
		case errors.Is(err, ErrCursorExpired):
			if status != http.StatusGone && code != "cursor_expired" {
				t.Fatalf("cursor expired from a %d %q", status, code)
			}
			return
		case errors.Is(err, ErrUnauthorized):
			if status != http.StatusUnauthorized {
				t.Fatalf("unauthorized from a %d", status)
			}
			return
		case errors.Is(err, ErrInvalidResponse) || errors.Is(err, ErrResponseTooLarge):
			if status != http.StatusOK {
				t.Fatalf("%v from a %d", err, status)
			}
			return
		case errors.Is(err, ErrStatus):
			if status == http.StatusOK {
				t.Fatalf("%v from a 200", err)
			}
			return
		default:
			t.Fatalf("error of no kind: %v", err)
		}
		for i, ch := range page.Changes {
			if ch.Type == "" || ch.ClientID == "" || ch.Version <= 0 {
				t.Fatalf("change %d: %+v", i, ch)
			}
		}
		again, _ := json.Marshal(page)
		c2 := answering(t, func(*http.Request) (int, http.Header, []byte) { return 200, nil, again })
		page2, err := c2.Changes(context.Background(), "tok-a", "", 10, 0)
		if err != nil || !reflect.DeepEqual(page2, page) {
			t.Fatalf("page %+v written as %s reads back as %+v, %v", page, again, page2, err)
		}
	})
}

// FuzzBatchResults: any answer to a batch gives one outcome per
// request, each holding together; an answer that is not one result per
// operation leaves every one to retry (each may have been applied).
func FuzzBatchResults(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
		n      uint8
	}{
		{200, `{"results":[{"status":200,"body":{"id":"srv-1","version":2}},{"status":409,"body":{"error":{"code":"version_conflict"},"current":{"version":5,"data":{}}}}]}`, 2},
		{200, `{"results":[{"status":201,"body":{"id":"s"},"replayed":true,"retryAfter":-4}]}`, 1},
		{200, `{"results":[{"status":429,"retryAfter":30},{"status":"200"}]}`, 2},
		{200, `{"results":[]}`, 1},
		{200, `{"results":[{"status":200}]}`, 3},
		{200, `{"results":null}`, 1},
		{404, ``, 2},
		{405, ``, 1},
		{503, ``, 2},
		{401, `{"error":{"code":"unauthorized"}}`, 1},
	} {
		f.Add(s.status, []byte(s.body), s.n)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, n uint8) {
		status = 100 + (status%900+900)%900
		n = n%4 + 1
		rs := make([]Request, n)
		for i := range rs {
			rs[i] = fuzzRequest(uint8(i))
			rs[i].OperationID = "op-" + strconv.Itoa(i)
		}
		c := answering(t, func(*http.Request) (int, http.Header, []byte) { return status, nil, body })
		outs, err := c.SendBatch(context.Background(), rs)
		if errors.Is(err, ErrNoBatch) {
			if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
				t.Fatalf("no batch route from a %d", status)
			}
			return
		}
		if err != nil || len(outs) != len(rs) {
			t.Fatalf("SendBatch: %v, %d outcomes for %d", err, len(outs), len(rs))
		}
		var ans struct {
			Results []batchResult `json:"results"`
		}
		whole := status == http.StatusOK && json.Unmarshal(body, &ans) == nil && len(ans.Results) == len(rs)
		for i, o := range outs {
			checkOutcome(t, rs[i], o)
			if status == http.StatusOK && !whole && (o.Decision != Retry || o.Code != CodeServerError) {
				t.Fatalf("item %d of an answer that is not one result per operation: %s %s", i, o.Decision, o.Code)
			}
			if whole && o.Status != ans.Results[i].Status {
				t.Fatalf("item %d has status %d, its result %d", i, o.Status, ans.Results[i].Status)
			}
		}
	})
}

// FuzzRecord: any answer to a read of one record is the record under
// the client id asked for (its id, a version of 1 or more, no data when
// deleted), none, or an error; only a 200 gives a record or none; and
// a record, written again as the server writes it, reads back the same.
func FuzzRecord(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"items":[{"id":"s1","clientId":"c1","type":"notes","version":2,"data":{"a":1}}]}`},
		{200, `{"items":[{"id":"s1","clientId":"c1","version":3,"deleted":true,"data":{"a":1}}]}`},
		{200, `{"items":[]}`},
		{200, `{"items":null}`},
		{200, `{"items":[{"id":"s1","clientId":"c2","version":2}]}`},
		{200, `{"items":[{"id":"","clientId":"c1","version":2}]}`},
		{200, `{"items":[{"id":"s1","clientId":"c1","version":0}]}`},
		{200, `{"items":[1]}`},
		{200, `[]`},
		{404, ``},
		{401, ``},
		{500, ``},
	} {
		f.Add(s.status, []byte(s.body), "c1")
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, clientID string) {
		status = 100 + (status%900+900)%900
		if clientID == "" {
			clientID = "c1"
		}
		c := answering(t, func(*http.Request) (int, http.Header, []byte) { return status, nil, body })
		rec, err := c.Record(context.Background(), "tok-a", "notes", clientID)
		if err != nil {
			if rec != nil {
				t.Fatalf("a record %+v and an error %v", rec, err)
			}
			if status == http.StatusOK && !errors.Is(err, ErrNoRecordRead) && !errors.Is(err, ErrInvalidResponse) && !errors.Is(err, ErrResponseTooLarge) {
				t.Fatalf("200 read as %v", err)
			}
			return
		}
		if status != http.StatusOK {
			t.Fatalf("a record from a %d", status)
		}
		if rec == nil {
			return
		}
		if rec.ClientID != clientID || rec.ID == "" || rec.Version <= 0 || rec.Type != "notes" || rec.Deleted && rec.Data != nil {
			t.Fatalf("record %+v for client id %q", rec, clientID)
		}
		again, _ := json.Marshal(map[string]any{"items": []any{rec}})
		c2 := answering(t, func(*http.Request) (int, http.Header, []byte) { return 200, nil, again })
		rec2, err := c2.Record(context.Background(), "tok-a", "notes", clientID)
		if err != nil || !reflect.DeepEqual(rec2, rec) {
			t.Fatalf("record %+v written as %s reads back as %+v, %v", rec, again, rec2, err)
		}
	})
}
