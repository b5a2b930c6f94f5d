package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	"github.com/syncd/syncd/queue"
)

// recordStore records the writes the API hands the queue, and refuses
// them (404), so that the parsing is fuzzed without a queue.
type recordStore struct {
	fakeStore
	single []queue.Write
	batch  []queue.Write
}

func (s *recordStore) Apply(_ context.Context, w queue.Write) (queue.Result, error) {
	s.single = append(s.single, w)
	return queue.Result{}, queue.ErrEntityNotFound
}

func (s *recordStore) ApplyBatch(_ context.Context, ws []queue.Write, _ bool) ([]queue.Result, error) {
	s.batch = append(s.batch[:0], ws...)
	return nil, queue.ErrEntityNotFound
}

// aloneRequest is write i of a batch as the request that sends it
// alone, its id in the path escaped by esc; ok is false when the write
// has no such request (no op or type, an id that is not a string...).
type aloneRequest struct {
	method, path, body string
	header             map[string]string
}

func aloneOf(item json.RawMessage, esc func(string) string) (aloneRequest, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(item, &m) != nil || m == nil {
		return aloneRequest{}, false
	}
	str := func(name string) (string, bool) {
		var s string
		raw, ok := m[name]
		return s, ok && json.Unmarshal(raw, &s) == nil
	}
	for name := range m {
		switch name {
		case "op", "type", "id", "data", "idempotencyKey":
		default:
			return aloneRequest{}, false // no member of a single write
		}
	}
	op, okOp := str("op")
	typ, okType := str("type")
	id, okID := str("id")
	key, okKey := str("idempotencyKey")
	if !okOp || !okType || (m["id"] != nil && !okID) || (m["idempotencyKey"] != nil && !okKey) {
		return aloneRequest{}, false
	}
	rq := aloneRequest{path: "/v1/entities/" + esc(typ)}
	if okKey {
		rq.header = map[string]string{"Idempotency-Key": key}
	}
	var body []string
	if data, ok := m["data"]; ok {
		body = append(body, `"data":`+string(data))
	}
	switch op {
	case "create":
		rq.method = http.MethodPost
		if id, ok := m["id"]; ok {
			body = append(body, `"id":`+string(id))
		}
	case "update", "delete":
		if !okID {
			return aloneRequest{}, false
		}
		rq.method, rq.path = http.MethodPatch, rq.path+"/"+esc(id)
		if op == "delete" {
			rq.method = http.MethodDelete
		}
	default:
		return aloneRequest{}, false
	}
	if body != nil {
		rq.body = "{" + strings.Join(body, ",") + "}"
	}
	return rq, true
}

// storedForm is data as the queue stores it (queue's canonicalJSON):
// members sorted, no whitespace, numbers as written, no HTML escaping.
func storedForm(data []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// batchShaped reports whether body is a batch with nothing wrong but,
// maybe, its writes: JSON every reader takes alike, 1 to
// queue.MaxBatchWrites writes, and no member but writes and a boolean
// ordered.
func batchShaped(body []byte, writes int) bool {
	var m map[string]json.RawMessage
	if writes < 1 || writes > queue.MaxBatchWrites || jsonstrict.Check(body, 1<<20) != nil || json.Unmarshal(body, &m) != nil {
		return false
	}
	for name, raw := range m {
		var b bool
		if name != "writes" && (name != "ordered" || json.Unmarshal(raw, &b) != nil) {
			return false
		}
	}
	return true
}

// FuzzBatchWrites: the batch parser never panics nor answers 5xx; every
// write it accepts is accepted alone too, as the very same queue write
// (operation, type, id, data in the canonical form the queue stores and
// its size limit counts, key and fingerprint) whether the
// single request's path escapes the id with url.PathEscape or as
// JavaScript's encodeURIComponent does; a write it refuses (its index in
// the error) is refused alone too, and a batch refused as a whole has
// something wrong besides its writes. So a key sent alone and in a batch
// names one write, and a write has the same limits in both.
func FuzzBatchWrites(f *testing.F) {
	write := func(op, id, data, key string) string {
		w := `{"op":"` + op + `","type":"note"`
		if id != "" {
			w += `,"id":` + jsonString(id)
		}
		if data != "" {
			w += `,"data":` + data
		}
		if key != "" {
			w += `,"idempotencyKey":` + jsonString(key)
		}
		return w + "}"
	}
	for i, id := range specialIDs {
		k := "k" + strconv.Itoa(i)
		f.Add([]byte(batchOf(write("update", id, `{"n":1}`, k), write("delete", id, "", k+"d"), write("create", id, `{}`, k+"c"))))
	}
	for _, s := range []string{
		batchOf(write("create", "", `{"b":2, "a":[1.0, 1e2, -0, "<&>\u2028"]}`, "k")),
		batchOf(write("create", "n1", "{\n  \"a\" : { \"b\" : null }\n}\n", "k"), write("update", "n1", `{"a":null}`, "k2")),
		batchOf(write("update", "a\\u003ab", `{}`, "k")), // an escape in the id's JSON
		batchOf(write("create", "", nested(MaxJSONDepth-1), "deep")),
		batchOf(write("create", "", nested(MaxJSONDepth), "deeper")),
		batchOf(write("create", "x", `{}`, ""), write("delete", "x", `{}`, "")),
		batchOf(write("create", "", `[1]`, "k")),
		batchOf(write("create", "..", `{}`, "k")),
		batchOf(write("create", "x", `{}`, "a b")),
		batchOf(write("upsert", "x", `{}`, "k")),
		batchOf(write("update", "", `{}`, "k")),
		batchOf(`{"op":"create","type":"no/te","data":{}}`),
		batchOf(`{"op":"create","type":"note","data":{},"x":1}`),
		batchOf(`{"op":"create","type":"note","data":{"a":1,"a":2}}`),
		batchOf(`{"op":"create","type":"note","data":{},"op":"delete"}`),
		batchOf(`{"op":"create","type":"note","id":7,"data":{}}`),
		`{"writes":[],"ordered":true}`, `{"writes":{}}`, `{"writes":[1]}`, `{"writes":[` + nested(MaxJSONDepth) + `]}`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	store := &recordStore{fakeStore: fakeStore{err: queue.ErrEntityNotFound}}
	s, err := New(Config{Daemon: &fakeDaemon{account: "alice"}, Store: store, Bus: fakeBus{err: daemon.ErrBusClosed}, Token: testToken, Logger: discardLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		store.batch, store.single = nil, nil
		w := fuzzServe(s, http.MethodPost, "/v1/batch", string(body), nil)
		ans := checkAnswer(t, "batch", w)
		batched := store.batch
		var top struct {
			Writes []json.RawMessage `json:"writes"`
		}
		if json.Unmarshal(body, &top) != nil {
			if batched != nil {
				t.Fatalf("a batch that is not JSON was written: %q", body)
			}
			return
		}
		// The writes the parser accepted: all when the queue got them,
		// those before the refused one otherwise.
		accepted, refused := len(batched), -1
		if batched == nil {
			var withIndex struct {
				Error struct {
					Index *int `json:"index"`
				} `json:"error"`
			}
			json.Unmarshal(w.Body.Bytes(), &withIndex)
			if withIndex.Error.Index == nil {
				// Refused as a whole: for nothing any of its writes
				// did, unless the batch's own members or count were
				// wrong (a write nested as deep as alone included).
				if !batchShaped(body, len(top.Writes)) {
					return
				}
				for _, item := range top.Writes {
					rq, ok := aloneOf(item, url.PathEscape)
					if !ok {
						return
					}
					store.single = nil
					if fuzzServe(s, rq.method, rq.path, rq.body, rq.header) == nil || store.single == nil {
						return
					}
				}
				t.Fatalf("every write is accepted alone, the batch of them refused: %d %s", w.Code, w.Body)
			}
			refused, accepted = *withIndex.Error.Index, *withIndex.Error.Index
			if refused < 0 || refused >= len(top.Writes) {
				t.Fatalf("index %d of %d writes: %s", refused, len(top.Writes), w.Body)
			}
		} else if len(batched) != len(top.Writes) {
			t.Fatalf("%d writes reached the queue of %d", len(batched), len(top.Writes))
		}
		for i := 0; i < accepted || i == refused; i++ {
			for _, esc := range []func(string) string{url.PathEscape, encodeURIComponent} {
				rq, ok := aloneOf(top.Writes[i], esc)
				if !ok {
					if i < accepted {
						t.Fatalf("write %d accepted, but has no single request: %s", i, top.Writes[i])
					}
					break
				}
				store.single = nil
				aw := fuzzServe(s, rq.method, rq.path, rq.body, rq.header)
				if aw == nil {
					continue // a path url.Parse refuses: no request
				}
				checkAnswer(t, rq.method+" "+rq.path, aw)
				switch {
				case i == refused && store.single != nil:
					t.Fatalf("write %d refused in a batch (%d %s: %s) but accepted alone as %s %s %s", i, w.Code, ans.Error.Code, ans.Error.Message, rq.method, rq.path, rq.body)
				case i < accepted && batched == nil && store.single == nil:
					t.Fatalf("write %d passed the batch's parser but is refused alone as %s %s %s: %d %s", i, rq.method, rq.path, rq.body, aw.Code, aw.Body)
				case i < accepted && batched != nil:
					if store.single == nil {
						t.Fatalf("write %d accepted in a batch but refused alone as %s %s %s: %d %s", i, rq.method, rq.path, rq.body, aw.Code, aw.Body)
					}
					a, b := store.single[0], batched[i]
					if b.Op != queue.OpDelete && !bytes.Equal(b.Data, storedForm(b.Data)) {
						t.Fatalf("write %d's data reaches the queue as %s, not in the canonical form its size limit counts", i, b.Data)
					}
					if a.Op != b.Op || a.EntityType != b.EntityType || a.EntityID != b.EntityID || !bytes.Equal(a.Data, b.Data) ||
						a.OperationID != b.OperationID || a.RequestFingerprint != b.RequestFingerprint || a.App != b.App {
						t.Fatalf("write %d alone as %s %s %s is not the write batched:\nalone   %+v\nbatched %+v", i, rq.method, rq.path, rq.body, a, b)
					}
				}
			}
		}
	})
}
