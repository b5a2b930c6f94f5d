package localapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/syncd/syncd/queue"
)

// A write sent in a batch is the same write as sent alone: one
// fingerprint under its key, whatever route and escaping carried it, and
// the same data limits.

// specialIDs are ids whose characters url.PathEscape and JavaScript's
// encodeURIComponent escape differently.
var specialIDs = []string{"a:b", "a@b", "a+b", "a,b", "a;b", "a=b", "a$b", "a&b", "a'b", "a(b)", "a*b", "a!b", ":@+,;=$&'()*!"}

// encodeURIComponent escapes s as JavaScript's encodeURIComponent does
// (the TypeScript client's escaping of a path segment).
func encodeURIComponent(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// batchOf is a batch body of the given write objects.
func batchOf(writes ...string) string { return `{"writes":[` + strings.Join(writes, ",") + `]}` }

// TestBatchWriteFingerprintsAsAlone: an update or delete sent alone
// (with the path escaped by encodeURIComponent or url.PathEscape) and in
// a batch under one key replays, in either order, and writes nothing.
func TestBatchWriteFingerprintsAsAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	escapes := map[string]func(string) string{"encodeURIComponent": encodeURIComponent, "url.PathEscape": url.PathEscape}
	for i, id := range specialIDs {
		e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":` + jsonString(id) + `,"data":{"n":0}}`})
		for name, esc := range escapes {
			path := "/v1/entities/note/" + esc(id)

			// Alone, then in a batch.
			k := fmt.Sprintf("alone-%s-%d", name, i)
			first := e.must(200, req{method: "PATCH", path: path, header: key(k), body: `{"data":{"n":1}}`})
			before := e.snapshot()
			r := e.do(req{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"update","type":"note","id":` + jsonString(id) + `,"data":{"n":1},"idempotencyKey":"` + k + `"}`)})
			if r.status != 200 {
				t.Errorf("%q: PATCH %s then the same update in a batch: %d %s", id, path, r.status, r.raw)
			} else if after := e.snapshot(); !after.equal(before) {
				t.Errorf("%q: the batch's replay wrote", id)
			}
			// The other escaping alone replays too.
			for other, esc2 := range escapes {
				if r := e.do(req{method: "PATCH", path: "/v1/entities/note/" + esc2(id), header: key(k), body: `{"data":{"n":1}}`}); r.status != 200 || r.header.Get(headerReplayed) != "true" || r.str("operationId") != first.str("operationId") {
					t.Errorf("%q: PATCH escaped by %s, then by %s: %d replayed=%q %s", id, name, other, r.status, r.header.Get(headerReplayed), r.raw)
				}
			}

			// In a batch, then alone.
			k = fmt.Sprintf("batch-%s-%d", name, i)
			e.must(200, req{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"update","type":"note","id":` + jsonString(id) + `,"data":{"n":2},"idempotencyKey":"` + k + `"}`)})
			if r := e.do(req{method: "PATCH", path: path, header: key(k), body: `{"data":{"n":2}}`}); r.status != 200 || r.header.Get(headerReplayed) != "true" {
				t.Errorf("%q: an update in a batch, then PATCH %s: %d replayed=%q %s", id, path, r.status, r.header.Get(headerReplayed), r.raw)
			}
		}
		// A delete, in a batch then alone.
		k := fmt.Sprintf("del-%d", i)
		e.must(200, req{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"delete","type":"note","id":` + jsonString(id) + `,"idempotencyKey":"` + k + `"}`)})
		if r := e.do(req{method: "DELETE", path: "/v1/entities/note/" + encodeURIComponent(id), header: key(k)}); r.status != 200 || r.header.Get(headerReplayed) != "true" {
			t.Errorf("%q: a delete in a batch, then alone: %d replayed=%q %s", id, r.status, r.header.Get(headerReplayed), r.raw)
		}
	}
}

// nested is an object nested depth levels deep (the object itself
// counts one): {"a":[[...]]}.
func nested(depth int) string {
	return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
}

// TestBatchDataDepthAsAlone: an entity's data may nest 127 levels, alone
// and in a batch; 128 is 400 invalid_json both ways.
func TestBatchDataDepthAsAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	ok, deep := nested(MaxJSONDepth-1), nested(MaxJSONDepth)

	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"alone","data":` + ok + `}`})
	e.must(200, req{method: "PATCH", path: "/v1/entities/note/alone", body: `{"data":` + ok + `}`})
	if r := e.do(req{method: "POST", path: "/v1/batch", body: batchOf(
		`{"op":"create","type":"note","id":"batched","data":`+ok+`}`,
		`{"op":"update","type":"note","id":"batched","data":`+ok+`}`)}); r.status != 200 {
		t.Errorf("data nested %d levels in a batch: %d %s", MaxJSONDepth-1, r.status, r.raw)
	}

	if r := e.do(req{method: "POST", path: "/v1/entities/note", body: `{"data":` + deep + `}`}); r.status != 400 || r.code() != CodeInvalidJSON {
		t.Errorf("data nested %d levels alone: %d %s", MaxJSONDepth, r.status, r.raw)
	}
	before := e.snapshot()
	for _, op := range []string{`"op":"create"`, `"op":"update","id":"alone"`} {
		r := e.do(req{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"create","type":"note","data":{}}`, `{`+op+`,"type":"note","data":`+deep+`}`)})
		if r.status != 400 || r.code() != CodeInvalidJSON {
			t.Errorf("data nested %d levels in a batch (%s): %d %s", MaxJSONDepth, op, r.status, r.raw)
		}
	}
	if after := e.snapshot(); !after.equal(before) {
		t.Error("a refused batch wrote")
	}
}

// pretty is JSON data of a string member whose canonical form is
// exactly canonical bytes, padded with pad bytes of whitespace.
func pretty(canonical, pad int) string {
	s := strings.Repeat("x", canonical-len(`{"s":""}`))
	return "{\n" + strings.Repeat(" ", pad) + `"s" : "` + s + "\"\n}"
}

// TestDataSizeIsCanonical: the data limit counts the data's canonical
// form (what is stored and sent), not the app's whitespace: pretty data
// under the limit is accepted alone and in a batch, and stored compact;
// data over it is refused both ways.
func TestDataSizeIsCanonical(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		limit int // queue.Config.MaxDataBytes, 0: the default
		pad   int
	}{
		{"small limit", 4096, 4096},
		{"default limit", 0, 32 << 10}, // the body limit leaves 64 KiB
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOptions{account: "alice", qcfg: queue.Config{MaxDataBytes: tt.limit}})
			limit := tt.limit
			if limit == 0 {
				limit = queue.DefaultMaxDataBytes
			}
			fits, over := pretty(limit, tt.pad), pretty(limit+1, 0)
			if len(fits) <= limit {
				t.Fatalf("the pretty data is %d bytes, not past the limit of %d", len(fits), limit)
			}
			c := e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"alone","data":` + fits + `}`})
			if data, _ := json.Marshal(c.body["data"]); len(data) != limit {
				t.Errorf("stored data is %d bytes, want %d", len(data), limit)
			}
			e.must(200, req{method: "PATCH", path: "/v1/entities/note/alone", body: `{"data":` + fits + `}`})
			if r := e.do(req{method: "POST", path: "/v1/batch", body: batchOf(
				`{"op":"create","type":"note","id":"batched","data":`+fits+`}`,
				`{"op":"update","type":"note","id":"batched","data":`+fits+`}`)}); r.status != 200 {
				t.Errorf("pretty data under the limit in a batch: %d %.300s", r.status, r.raw)
			}

			before := e.snapshot()
			if r := e.do(req{method: "POST", path: "/v1/entities/note", body: `{"data":` + over + `}`}); r.status != 400 || r.code() != CodeInvalidRequest {
				t.Errorf("data one byte over the limit alone: %d %.300s", r.status, r.raw)
			}
			r := e.do(req{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"create","type":"note","data":{}}`, `{"op":"create","type":"note","data":`+over+`}`)})
			if errObj, _ := r.body["error"].(map[string]any); r.status != 400 || r.code() != CodeInvalidRequest || errObj["index"] != 1.0 {
				t.Errorf("data one byte over the limit in a batch: %d %.300s", r.status, r.raw)
			}
			if after := e.snapshot(); !after.equal(before) {
				t.Error("a refused write wrote")
			}
		})
	}
}

// oldFingerprint is the request fingerprint syncd stored before it
// fingerprinted decoded writes: SHA-256 over the method, the escaped
// path and json.Marshal of the decoded body.
func oldFingerprint(method, escapedPath, body string) string {
	h := sha256.New()
	io.WriteString(h, method)
	h.Write([]byte{0})
	io.WriteString(h, escapedPath)
	h.Write([]byte{0})
	if body != "" {
		d := json.NewDecoder(bytes.NewReader([]byte(body)))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			panic(err)
		}
		c, _ := json.Marshal(v)
		h.Write(c)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestOldFingerprintsReplay: an operation stored before the upgrade,
// with the fingerprint of its request then, still replays when its
// request is sent again, alone or in a batch, and another write under
// its key is still 422.
func TestOldFingerprintsReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{account: "alice"})
	ctx := context.Background()
	for _, id := range []string{"plain", "a:b", "a(b)"} {
		if _, err := e.store.Apply(ctx, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: id, Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	data := `{"t":"<b>&amp;</b>","n":1.50}`
	for _, tt := range []struct {
		name string
		w    queue.Write
		// the request that stored it then, and how it is sent again
		method, oldPath, oldBody string
		again                    []req
	}{
		{"create alone", queue.Write{Op: queue.OpCreate, EntityID: "c1"}, "POST", "/v1/entities/note", `{"id":"c1","data":` + data + `}`, []req{
			{method: "POST", path: "/v1/entities/note", body: `{"data":` + data + `,"id":"c1"}`},
			{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"create","type":"note","id":"c1","data":` + data + `,"idempotencyKey":"KEY"}`)},
		}},
		{"create without id", queue.Write{Op: queue.OpCreate}, "POST", "/v1/entities/note", `{"data":` + data + `}`, []req{
			{method: "POST", path: "/v1/entities/note", body: `{"data":` + data + `}`},
			{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"create","type":"note","data":` + data + `,"idempotencyKey":"KEY"}`)},
		}},
		{"update alone, encodeURIComponent", queue.Write{Op: queue.OpUpdate, EntityID: "a:b"}, "PATCH", "/v1/entities/note/a%3Ab", `{"data":` + data + `}`, []req{
			{method: "PATCH", path: "/v1/entities/note/a%3Ab", body: `{"data":` + data + `}`},
			{method: "PATCH", path: "/v1/entities/note/a:b", body: `{"data":` + data + `}`},
			{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"update","type":"note","id":"a:b","data":` + data + `,"idempotencyKey":"KEY"}`)},
		}},
		{"update in a batch, url.PathEscape", queue.Write{Op: queue.OpUpdate, EntityID: "a(b)"}, "PATCH", "/v1/entities/note/a%28b%29", `{"data":` + data + `}`, []req{
			{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"update","type":"note","id":"a(b)","data":` + data + `,"idempotencyKey":"KEY"}`)},
			{method: "PATCH", path: "/v1/entities/note/a(b)", body: `{"data":` + data + `}`},
			{method: "PATCH", path: "/v1/entities/note/a%28b%29", body: `{"data":` + data + `}`},
		}},
		{"delete", queue.Write{Op: queue.OpDelete, EntityID: "plain"}, "DELETE", "/v1/entities/note/plain", "", []req{
			{method: "DELETE", path: "/v1/entities/note/plain"},
			{method: "POST", path: "/v1/batch", body: batchOf(`{"op":"delete","type":"note","id":"plain","idempotencyKey":"KEY"}`)},
		}},
	} {
		key := "old-" + strings.ReplaceAll(tt.name, " ", "-")
		key = strings.ReplaceAll(strings.ReplaceAll(key, ",", ""), ".", "")
		w := tt.w
		w.AccountID, w.EntityType, w.OperationID = "alice", "note", key
		w.RequestFingerprint = oldFingerprint(tt.method, tt.oldPath, tt.oldBody)
		if w.Op != queue.OpDelete {
			w.Data = json.RawMessage(data)
		}
		stored, err := e.store.Apply(ctx, w)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		before := e.snapshot()
		for _, rq := range tt.again {
			rq.body = strings.ReplaceAll(rq.body, "KEY", key)
			if rq.path != "/v1/batch" {
				rq.header = map[string]string{"Idempotency-Key": key}
			}
			r := e.do(rq)
			opID := r.str("operationId")
			if res, _ := r.body["results"].([]any); len(res) == 1 {
				m, _ := res[0].(map[string]any)
				opID, _ = m["operationId"].(string)
			}
			if r.status >= 300 || opID != stored.Operation.ID {
				t.Errorf("%s: sent again as %s %s: %d %s", tt.name, rq.method, rq.path, r.status, r.raw)
			}
		}
		if after := e.snapshot(); !after.equal(before) {
			t.Errorf("%s: the replays wrote", tt.name)
		}
		// Another write under the key is still refused.
		other := tt.again[0]
		other.header = map[string]string{"Idempotency-Key": key}
		if other.path == "/v1/batch" {
			other.header = nil
		}
		if other.body != "" {
			other.body = strings.ReplaceAll(strings.ReplaceAll(other.body, "KEY", key), `"n":1.50`, `"n":1.5`)
		} else {
			other.path += "x"
		}
		if r := e.do(other); r.status != 422 || r.code() != CodeKeyReused {
			t.Errorf("%s: another write under the key: %d %s", tt.name, r.status, r.raw)
		}
	}
}
