package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/idempotency/fieldmerge"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	bolt "go.etcd.io/bbolt"
)

// conflictReply is a 409 version_conflict answer as a client reads it.
type conflictReply struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Current *Entity  `json:"current"`
	Paths   []string `json:"paths"`
	Base    *Version `json:"base"`
}

// conflictOf reads r as a 409 version_conflict answer, failing the test
// when it is not one.
func conflictOf(t *testing.T, r result) conflictReply {
	t.Helper()
	var c conflictReply
	if r.status != http.StatusConflict || json.Unmarshal([]byte(r.body), &c) != nil ||
		c.Error.Code != CodeVersionConflict || c.Error.Message == "" || c.Current == nil || r.header.Get("Retry-After") != "" {
		t.Fatalf("want 409 version_conflict with the current record, got %d %s", r.status, r.body)
	}
	return c
}

// mergeBody is a PATCH body: data, made on base, changing paths (none:
// no "paths" member, a record-level update).
func mergeBody(data string, base int64, paths ...string) string {
	if paths == nil {
		return fmt.Sprintf(`{"data":%s,"payloadVersion":1,"baseVersion":%d}`, data, base)
	}
	p, _ := json.Marshal(paths)
	return fmt.Sprintf(`{"data":%s,"payloadVersion":1,"baseVersion":%d,"paths":%s}`, data, base, p)
}

// createOne creates a record and returns it; the answer must be 201.
func (h *harness) createOne(t *testing.T, actor, typ, clientID, data string) Entity {
	t.Helper()
	r := h.must(t, "POST", "/v1/"+typ, actor, newKey(), `{"clientId":"`+clientID+`","data":`+data+`,"payloadVersion":1}`)
	if r.status != http.StatusCreated {
		t.Fatalf("create %s: %d %s", clientID, r.status, r.body)
	}
	return entityOf(t, r)
}

// getOne reads a record by id; the answer must be 200.
func (h *harness) getOne(t *testing.T, actor, typ, id string) Entity {
	t.Helper()
	r := h.must(t, "GET", "/v1/"+typ+"/"+id, actor, "", "")
	if r.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	return entityOf(t, r)
}

// versionsOf reads GET /v1/{type}/{id}/versions; the answer must be 200.
func (h *harness) versionsOf(t *testing.T, actor, typ, id string) []Version {
	t.Helper()
	r := h.must(t, "GET", "/v1/"+typ+"/"+id+"/versions", actor, "", "")
	var ans struct {
		Items []Version `json:"items"`
	}
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &ans) != nil || ans.Items == nil {
		t.Fatalf("versions of %s: %d %s", id, r.status, r.body)
	}
	return ans.Items
}

// storedVersions counts the kept versions of record id in the storage
// itself, whether or not the record is still there.
func (h *harness) storedVersions(t *testing.T, id string) int {
	t.Helper()
	n := 0
	switch st := h.srv.store.(type) {
	case *boltEntities:
		err := st.db.View(func(tx *bolt.Tx) error {
			prefix := append([]byte(id), 0)
			c := tx.Bucket(bucketVersions).Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	case *pgEntities:
		if err := st.pool.QueryRow(context.Background(), `SELECT count(*) FROM remote_versions WHERE entity_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown store %T", st)
	}
	return n
}

// sameJSON reports whether a and b are the same JSON value (members in
// any order).
func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// TestMergeApplies: under the merge policy (the default), writes made
// on the same base that change different fields all apply, each one
// version, and the record keeps every one's value; the same field set
// to the same value is no conflict.
func TestMergeApplies(t *testing.T) {
	t.Parallel()
	type write struct {
		data  string
		paths []string
	}
	tests := []struct {
		name    string
		initial string
		writes  []write // each made on version 1
		want    string
	}{
		{"disjoint fields", `{"title":"t","body":"b","tags":["x"]}`,
			[]write{{`{"title":"A","body":"b","tags":["x"]}`, []string{"/title"}}, {`{"title":"t","body":"B","tags":["x"]}`, []string{"/body"}}},
			`{"title":"A","body":"B","tags":["x"]}`},
		{"nested fields", `{"name":"n","address":{"city":"c","zip":"z"}}`,
			[]write{{`{"name":"n","address":{"city":"Lyon","zip":"z"}}`, []string{"/address/city"}}, {`{"name":"n","address":{"city":"c","zip":"69001"}}`, []string{"/address/zip"}}},
			`{"name":"n","address":{"city":"Lyon","zip":"69001"}}`},
		{"a field added and one removed", `{"a":1,"b":2}`,
			[]write{{`{"a":1}`, []string{"/b"}}, {`{"a":1,"b":2,"c":3}`, []string{"/c"}}},
			`{"a":1,"c":3}`},
		{"an array is one field", `{"tags":["x"],"n":1}`,
			[]write{{`{"tags":["x","y"],"n":1}`, []string{"/tags"}}, {`{"tags":["x"],"n":2}`, []string{"/n"}}},
			`{"tags":["x","y"],"n":2}`},
		{"escaped member names", `{"a/b":1,"c~d":2}`,
			[]write{{`{"a/b":10,"c~d":2}`, []string{"/a~1b"}}, {`{"a/b":1,"c~d":20}`, []string{"/c~0d"}}},
			`{"a/b":10,"c~d":20}`},
		{"escapes decoded in RFC 6901 order", `{"~1":1,"/":2}`,
			[]write{{`{"~1":10,"/":2}`, []string{"/~01"}}, {`{"~1":1,"/":20}`, []string{"/~1"}}},
			`{"~1":10,"/":20}`},
		{"same field, same value", `{"title":"t","body":"b"}`,
			[]write{{`{"title":"X","body":"b"}`, []string{"/title"}}, {`{"title":"X","body":"b"}`, []string{"/title"}}},
			`{"title":"X","body":"b"}`},
		{"paths listed twice", `{"a":1,"b":2}`,
			[]write{{`{"a":5,"b":2}`, []string{"/a", "/a"}}, {`{"a":1,"b":6}`, []string{"/b"}}},
			`{"a":5,"b":6}`},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		for _, tt := range tests {
			e := h.createOne(t, "alice", "notes", newKey(), tt.initial)
			for i, w := range tt.writes {
				r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(w.data, 1, w.paths...))
				if r.status != http.StatusOK || entityOf(t, r).Version != int64(2+i) {
					t.Fatalf("%s: write %d: %d %s, want 200 at version %d", tt.name, i, r.status, r.body, 2+i)
				}
			}
			got := h.getOne(t, "alice", "notes", e.ID)
			if !sameJSON(t, got.Data, json.RawMessage(tt.want)) || got.Version != int64(1+len(tt.writes)) {
				t.Errorf("%s: %s at version %d, want %s at version %d", tt.name, got.Data, got.Version, tt.want, 1+len(tt.writes))
			}
		}
	})
}

// TestMergeConcurrentWriters: writers changing different fields on the
// same base at once all apply, one version each, on both storages.
func TestMergeConcurrentWriters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		const n = 8
		initial := map[string]int{}
		for i := range n {
			initial[fmt.Sprintf("f%d", i)] = 0
		}
		raw, _ := json.Marshal(initial)
		e := h.createOne(t, "alice", "notes", "c", string(raw))
		var wg sync.WaitGroup
		results, errs := make([]result, n), make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				mine := map[string]int{}
				for k, v := range initial {
					mine[k] = v
				}
				mine[fmt.Sprintf("f%d", i)] = i + 1
				data, _ := json.Marshal(mine)
				<-start
				results[i], errs[i] = h.do("PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(string(data), 1, fmt.Sprintf("/f%d", i)))
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil || results[i].status != http.StatusOK {
				t.Fatalf("writer %d: %v %d %s", i, errs[i], results[i].status, results[i].body)
			}
		}
		got := h.getOne(t, "alice", "notes", e.ID)
		want := map[string]int{}
		for i := range n {
			want[fmt.Sprintf("f%d", i)] = i + 1
		}
		wantRaw, _ := json.Marshal(want)
		if got.Version != n+1 || !sameJSON(t, got.Data, wantRaw) {
			t.Fatalf("after %d concurrent writers: version %d %s, want %d %s", n, got.Version, got.Data, n+1, wantRaw)
		}
	})
}

// TestMergeConflict: the same field set to different values on the same
// base is a conflict on that field alone: 409 version_conflict listing
// it, the record as it is in "current" and as it was at the base in
// "base", nothing of the write applied; the 409 is stored under its
// key. A whole object over a changed member of it conflicts too.
func TestMergeConflict(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		e := h.createOne(t, "alice", "notes", "c", `{"title":"t","body":"b","address":{"city":"c","zip":"z"}}`)
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(),
			mergeBody(`{"title":"A","body":"b","address":{"city":"c","zip":"z"}}`, 1, "/title")) // version 2
		feedBefore := pageOf(t, h.must(t, "GET", "/v1/changes?limit=1000", "alice", "", "")).Cursor

		key := newKey()
		body := mergeBody(`{"title":"B","body":"B2","address":{"city":"c","zip":"z"}}`, 1, "/title", "/body")
		r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", key, body)
		c := conflictOf(t, r)
		if !slices.Equal(c.Paths, []string{"/title"}) {
			t.Errorf("conflicting paths %q, want only /title", c.Paths)
		}
		if c.Current.Version != 2 || !sameJSON(t, c.Current.Data, json.RawMessage(`{"title":"A","body":"b","address":{"city":"c","zip":"z"}}`)) {
			t.Errorf("current = %+v", c.Current)
		}
		if c.Base == nil || c.Base.Version != 1 || c.Base.Deleted || c.Base.OperationID == "" ||
			!sameJSON(t, c.Base.Data, json.RawMessage(`{"title":"t","body":"b","address":{"city":"c","zip":"z"}}`)) {
			t.Errorf("base = %+v, want version 1 as created", c.Base)
		}
		if !strings.Contains(c.Error.Message, `"/title"`) {
			t.Errorf("message %q does not name the field", c.Error.Message)
		}
		// Nothing applied: not the body, which alone would not conflict.
		if got := h.getOne(t, "alice", "notes", e.ID); got.Version != 2 || !strings.Contains(string(got.Data), `"body":"b"`) {
			t.Fatalf("after the 409: %+v", got)
		}
		if p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+feedBefore, "alice", "", "")); len(p.Changes) != 0 {
			t.Fatalf("the feed after a 409: %+v", p.Changes)
		}
		if again := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", key, body); !again.replayed || again.status != http.StatusConflict || again.body != r.body {
			t.Fatalf("resend of the refused write: %d replayed=%v %s, want the stored 409 %s", again.status, again.replayed, again.body, r.body)
		}

		// The whole /address over /address/city changed since: overlap.
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(),
			mergeBody(`{"title":"A","body":"b","address":{"city":"Lyon","zip":"z"}}`, 2, "/address/city")) // version 3
		r = h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"A","body":"b","address":{}}`, 2, "/address"))
		if c := conflictOf(t, r); !slices.Equal(c.Paths, []string{"/address"}) || c.Base == nil || c.Base.Version != 2 {
			t.Fatalf("/address over a changed /address/city: paths %q, base %+v", c.Paths, c.Base)
		}
		// Made on the current version, the same write applies.
		if r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"A","body":"b","address":{}}`, 3, "/address")); r.status != http.StatusOK ||
			!sameJSON(t, entityOf(t, r).Data, json.RawMessage(`{"title":"A","body":"b","address":{}}`)) {
			t.Fatalf("on the current version: %d %s", r.status, r.body)
		}
	})
}

// TestMergeBaseNotKept: a conflict whose base version the history no
// longer holds answers without "base".
func TestMergeBaseNotKept(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		cfg.HistoryVersions = 2
		h := setup(t, cfg)
		e := h.createOne(t, "alice", "notes", "c", `{"n":0}`)
		for v := int64(1); v <= 3; v++ {
			h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(fmt.Sprintf(`{"n":%d}`, v), v, "/n"))
		}
		c := conflictOf(t, h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"n":-1}`, 1, "/n")))
		if !slices.Equal(c.Paths, []string{"/n"}) || c.Base != nil || c.Current.Version != 4 {
			t.Fatalf("paths %q, base %+v, current version %d; want /n, no base, 4", c.Paths, c.Base, c.Current.Version)
		}
	})
}

// TestMergeWholeWrites: under merge, an update without paths and a
// delete are record-level: made on an old base they answer 409 (listing
// the paths changed since), made on the current one they apply. After
// an update without paths, a merge made before it conflicts on any
// field it changes that the record holds.
func TestMergeWholeWrites(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		e := h.createOne(t, "alice", "notes", "c", `{"title":"t","body":"b"}`)
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"A","body":"b"}`, 1, "/title")) // 2
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"t","body":"B"}`, 1, "/body"))  // 3

		// An update without paths on an old base: refused whole.
		c := conflictOf(t, h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"t","body":"b","x":1}`, 2)))
		if !slices.Equal(c.Paths, []string{"/body"}) || c.Base == nil || c.Base.Version != 2 || c.Current.Version != 3 {
			t.Fatalf("update without paths on base 2: paths %q, base %+v", c.Paths, c.Base)
		}
		// Deletes on old bases: the paths changed since each.
		for _, tc := range []struct {
			base  int64
			paths []string
		}{{1, []string{"/body", "/title"}}, {2, []string{"/body"}}} {
			r := h.must(t, "DELETE", fmt.Sprintf("/v1/notes/%s?baseVersion=%d", e.ID, tc.base), "alice", newKey(), "")
			c := conflictOf(t, r)
			if !slices.Equal(c.Paths, tc.paths) || c.Base == nil || c.Base.Version != tc.base || c.Current.Deleted {
				t.Fatalf("delete on base %d: paths %q base %+v, want %q", tc.base, c.Paths, c.Base, tc.paths)
			}
		}
		if got := h.getOne(t, "alice", "notes", e.ID); got.Version != 3 || got.Deleted {
			t.Fatalf("after the refused writes: %+v", got)
		}

		// On the current version the update without paths replaces the
		// data whole (version 4, its life starts again).
		r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"W","body":"B"}`, 3))
		if r.status != http.StatusOK || string(entityOf(t, r).Data) != `{"title":"W","body":"B"}` || entityOf(t, r).Version != 4 {
			t.Fatalf("update without paths on the current version: %d %s", r.status, r.body)
		}
		// A merge made on 3 changing a field the record holds conflicts
		// (whatever the whole write changed is unknown field by field);
		// a field it does not hold is added.
		c = conflictOf(t, h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"W","body":"Z"}`, 3, "/body")))
		if !slices.Equal(c.Paths, []string{"/body"}) {
			t.Fatalf("merge over a whole write: paths %q", c.Paths)
		}
		if r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"title":"W","body":"B","new":1}`, 3, "/new")); r.status != http.StatusOK {
			t.Fatalf("a new field over a whole write: %d %s", r.status, r.body)
		}
		// A delete on the current version applies.
		if r := h.must(t, "DELETE", "/v1/notes/"+e.ID+"?baseVersion=5", "alice", newKey(), ""); r.status != http.StatusOK || !entityOf(t, r).Deleted {
			t.Fatalf("delete on the current version: %d %s", r.status, r.body)
		}
	})
}

// TestMergeCreate: under merge, a create whose clientId names a live
// record merges its fields into it: new fields and equal values apply
// (200 with the merged record, or the record unchanged when it holds
// them all); a field it sets to another value is a conflict (409,
// nothing applied).
func TestMergeCreate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		e := h.createOne(t, "alice", "notes", "c", `{"a":1,"b":{"x":2}}`)
		create := func(data string) result {
			return h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":`+data+`,"payloadVersion":1}`)
		}

		r := create(`{"a":1,"b":{"y":3},"c":4}`)
		got := entityOf(t, r)
		if r.status != http.StatusOK || got.ID != e.ID || got.Version != 2 ||
			!sameJSON(t, got.Data, json.RawMessage(`{"a":1,"b":{"x":2,"y":3},"c":4}`)) {
			t.Fatalf("create with new fields: %d %s", r.status, r.body)
		}
		if r.header.Get("Location") != "" {
			t.Errorf("a merged create has a Location: %q", r.header.Get("Location"))
		}
		r = create(`{"a":1,"c":4}`)
		if r.status != http.StatusOK || entityOf(t, r).Version != 2 {
			t.Fatalf("create holding nothing new: %d %s, want 200 unchanged at version 2", r.status, r.body)
		}
		c := conflictOf(t, create(`{"a":9,"d":5}`))
		if !slices.Equal(c.Paths, []string{"/a"}) || c.Current.Version != 2 {
			t.Fatalf("create with another value: paths %q, current %+v", c.Paths, c.Current)
		}
		if got := h.getOne(t, "alice", "notes", e.ID); got.Version != 2 || strings.Contains(string(got.Data), `"d"`) {
			t.Fatalf("after the refused create: %+v", got)
		}
		if n := h.count(t, "alice", "notes", "c"); n != 1 {
			t.Fatalf("%d records", n)
		}
	})
}

// TestMergeCreateResentLate is the caveat docs/server.md states: a
// create resent after its idempotency record is gone merges into the
// record. A field removed by a merge update is remembered (its path
// version), so the resend conflicts on it; a field removed by a
// record-level write is not, and the resend brings it back.
func TestMergeCreateResentLate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		create := `{"clientId":"c","data":{"a":1,"b":2},"payloadVersion":1}`
		e := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), create))
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"a":1}`, 1, "/b")) // 2: b removed
		if c := conflictOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), create)); !slices.Equal(c.Paths, []string{"/b"}) {
			t.Fatalf("resent create over a merged removal: paths %q", c.Paths)
		}
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"a":1,"b":2}`, 2))
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), mergeBody(`{"a":1}`, 3)) // 4: b removed, record-level
		r := h.must(t, "POST", "/v1/notes", "alice", newKey(), create)
		if r.status != http.StatusOK || !sameJSON(t, entityOf(t, r).Data, json.RawMessage(`{"a":1,"b":2}`)) {
			t.Fatalf("resent create over a record-level removal: %d %s, want b back", r.status, r.body)
		}
	})
}

// TestMergeInvalidPaths: paths that are not JSON pointers to a member,
// or too many, answer 400 validation and write nothing.
func TestMergeInvalidPaths(t *testing.T) {
	t.Parallel()
	many := make([]string, fieldmerge.MaxPaths+1)
	for i := range many {
		many[i] = fmt.Sprintf("/f%d", i)
	}
	tests := []struct {
		name, body string
	}{
		{"not a pointer", mergeBody(`{"a":2}`, 1, "a")},
		{"empty path", mergeBody(`{"a":2}`, 1, "")},
		{"bad escape", mergeBody(`{"a":2}`, 1, "/a~2")},
		{"trailing tilde", mergeBody(`{"a":2}`, 1, "/a~")},
		{"too long", mergeBody(`{"a":2}`, 1, "/"+strings.Repeat("a", fieldmerge.MaxPathBytes))},
		{"too many", mergeBody(`{"a":2}`, 1, many...)},
		{"not a list", `{"data":{"a":2},"baseVersion":1,"paths":"/a"}`},
		{"not strings", `{"data":{"a":2},"baseVersion":1,"paths":[1]}`},
		{"through a number", mergeBody(`{"a":2}`, 1, "/a/b")},
		{"into an array", mergeBody(`{"a":[2]}`, 1, "/a/0")},
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		h := setup(t, b.config(t))
		e := h.createOne(t, "alice", "notes", "c", `{"a":1}`)
		for _, tt := range tests {
			r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), tt.body)
			if r.status != http.StatusBadRequest || codeOf(t, r) != CodeValidation {
				t.Errorf("%s: %d %s, want 400 validation", tt.name, r.status, r.body)
			}
		}
		if got := h.getOne(t, "alice", "notes", e.ID); got.Version != 1 || string(got.Data) != `{"a":1}` {
			t.Fatalf("after refused writes: %+v", got)
		}
		if n := len(h.versionsOf(t, "alice", "notes", e.ID)); n != 1 {
			t.Fatalf("%d versions after refused writes, want 1", n)
		}
	})
}

// TestVersions: GET /v1/{type}/{id}/versions answers the record's kept
// versions newest first, at most HistoryVersions of them; the age sweep
// removes the old ones but never the current one; a deletion is a
// version; a swept tombstone takes its history with it (bbolt at once,
// PostgreSQL at the next history sweep); another actor's record and an
// unknown id are 404.
func TestVersions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := idempotencytest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
		cfg := b.config(t)
		cfg.Now = clock.Now
		cfg.HistoryVersions = 3
		cfg.HistoryAge = 24 * time.Hour
		h := setup(t, cfg)
		ctx := context.Background()

		e := h.createOne(t, "alice", "notes", "c", `{"n":1}`)
		keys := map[int64]string{}
		for v := int64(2); v <= 5; v++ {
			clock.Advance(time.Hour)
			keys[v] = newKey()
			if r := h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", keys[v], mergeBody(fmt.Sprintf(`{"n":%d}`, v), v-1, "/n")); r.status != http.StatusOK {
				t.Fatalf("update to %d: %d %s", v, r.status, r.body)
			}
		}
		got := h.versionsOf(t, "alice", "notes", e.ID)
		if len(got) != 3 {
			t.Fatalf("%d versions kept, want 3: %+v", len(got), got)
		}
		for i, v := range got {
			want := int64(5 - i)
			if v.Version != want || string(v.Data) != fmt.Sprintf(`{"n":%d}`, want) || v.Deleted || v.OperationID != keys[want] ||
				!v.UpdatedAt.Equal(time.Date(2026, 5, 1, int(want-1), 0, 0, 0, time.UTC)) {
				t.Errorf("item %d = %+v, want version %d by %s", i, v, want, keys[want])
			}
		}
		if n := h.storedVersions(t, e.ID); n != 3 {
			t.Fatalf("%d versions stored, want 3", n)
		}

		// Under a day old: the sweep keeps them.
		if n, err := h.srv.SweepHistory(ctx); err != nil || n != 0 {
			t.Fatalf("early sweep: %d %v", n, err)
		}
		clock.Advance(48 * time.Hour)
		if n, err := h.srv.SweepHistory(ctx); err != nil || n != 2 {
			t.Fatalf("sweep: %d %v, want 2 (the current version stays)", n, err)
		}
		if got := h.versionsOf(t, "alice", "notes", e.ID); len(got) != 1 || got[0].Version != 5 {
			t.Fatalf("after the sweep: %+v, want version 5 alone", got)
		}

		// A deletion is a version, without data.
		del := h.must(t, "DELETE", "/v1/notes/"+e.ID+"?baseVersion=5", "alice", newKey(), "")
		if del.status != http.StatusOK {
			t.Fatalf("delete: %d %s", del.status, del.body)
		}
		got = h.versionsOf(t, "alice", "notes", e.ID)
		if len(got) != 2 || got[0].Version != 6 || !got[0].Deleted || got[0].Data != nil || got[1].Version != 5 {
			t.Fatalf("after the delete: %+v", got)
		}
		if r := h.must(t, "GET", "/v1/notes/"+e.ID+"/versions", "alice", "", ""); strings.Contains(r.body, `"data":null`) {
			t.Fatalf("a deletion shows data: %s", r.body)
		}
		clock.Advance(48 * time.Hour)
		if n, err := h.srv.SweepHistory(ctx); err != nil || n != 1 {
			t.Fatalf("sweep after the delete: %d %v, want 1 (version 5; the deletion is current)", n, err)
		}

		// Another actor, another type, an unknown id: 404.
		for _, path := range []string{"/v1/notes/" + e.ID + "/versions", "/v1/tasks/" + e.ID + "/versions", "/v1/notes/" + uuid.NewString() + "/versions"} {
			actor := "alice"
			if path == "/v1/notes/"+e.ID+"/versions" {
				actor = "bob"
			}
			if r := h.must(t, "GET", path, actor, "", ""); r.status != http.StatusNotFound || codeOf(t, r) != CodeNotFound {
				t.Errorf("GET %s as %s: %d %s, want 404", path, actor, r.status, r.body)
			}
		}

		// The tombstone swept: the record is gone and so is its history.
		clock.Advance(DefaultTombstoneRetention)
		if n, err := h.srv.SweepTombstones(ctx); err != nil || n != 1 {
			t.Fatalf("tombstone sweep: %d %v", n, err)
		}
		if r := h.must(t, "GET", "/v1/notes/"+e.ID+"/versions", "alice", "", ""); r.status != http.StatusNotFound {
			t.Fatalf("versions of a swept record: %d %s", r.status, r.body)
		}
		if _, err := h.srv.SweepHistory(ctx); err != nil {
			t.Fatal(err)
		}
		if n := h.storedVersions(t, e.ID); n != 0 {
			t.Fatalf("%d versions of a swept record stored", n)
		}
	})
}

// TestVersionsOrphanSweep: on PostgreSQL the tombstone sweep leaves the
// record's versions, and the history sweep deletes them once they are
// past HistoryAge, the deletion too (no record holds it as current).
func TestVersionsOrphanSweep(t *testing.T) {
	t.Parallel()
	clock := idempotencytest.NewClock(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	h := setup(t, Config{PostgresDSN: idempotencytest.PostgresDSN(t), Now: clock.Now,
		HistoryAge: 60 * 24 * time.Hour, TombstoneRetention: 24 * time.Hour})
	ctx := context.Background()
	e := h.createOne(t, "alice", "notes", "c", `{"n":1}`)
	h.must(t, "DELETE", "/v1/notes/"+e.ID, "alice", newKey(), "")
	clock.Advance(48 * time.Hour)
	if n, err := h.srv.SweepTombstones(ctx); err != nil || n != 1 {
		t.Fatalf("tombstone sweep: %d %v", n, err)
	}
	if n, err := h.srv.SweepHistory(ctx); err != nil || n != 0 || h.storedVersions(t, e.ID) != 2 {
		t.Fatalf("history sweep inside HistoryAge: %d %v, %d stored; want the 2 orphans kept", n, err, h.storedVersions(t, e.ID))
	}
	clock.Advance(60 * 24 * time.Hour)
	if n, err := h.srv.SweepHistory(ctx); err != nil || n != 2 || h.storedVersions(t, e.ID) != 0 {
		t.Fatalf("history sweep past HistoryAge: %d %v, %d stored; want the 2 orphans gone", n, err, h.storedVersions(t, e.ID))
	}
}

// TestVersionsBoltSweepBatches: the bbolt history sweep walks more
// versions than one of its transactions deletes and keeps each record's
// current one. It runs on the store alone: a Server's sweep loop would
// race it.
func TestVersionsBoltSweepBatches(t *testing.T) {
	t.Parallel()
	db, err := openBolt(filepath.Join(t.TempDir(), "remote.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := newBoltEntities(db, true, &changefeed.Notifier{}, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	// 300 records of 5 versions each (the current one, 5, among them),
	// 1,500 in all, written straight into the buckets.
	const records = 300
	old := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	err = db.Update(func(tx *bolt.Tx) error {
		for range records {
			id := uuid.NewString()
			e := &boltEntity{Entity: Entity{ID: id, ClientID: id, Type: "notes", Data: json.RawMessage(`{}`), Version: 5,
				CreatedAt: old, UpdatedAt: old}, Actor: "alice"}
			if err := putEntity(tx, e); err != nil {
				return err
			}
			for v := int64(1); v <= 5; v++ {
				raw, _ := json.Marshal(Version{Version: v, Data: json.RawMessage(`{}`), UpdatedAt: old})
				if err := tx.Bucket(bucketVersions).Put(versionKey(id, v), raw); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.sweepHistory(context.Background(), old.Add(time.Hour)); err != nil || n != 4*records {
		t.Fatalf("sweep: %d %v, want %d", n, err, 4*records)
	}
	err = db.View(func(tx *bolt.Tx) error {
		n := 0
		err := tx.Bucket(bucketVersions).ForEach(func(k, _ []byte) error {
			n++
			if v := binary.BigEndian.Uint64(k[len(k)-8:]); v != 5 {
				return fmt.Errorf("version %d of %s left", v, k[:len(k)-9])
			}
			return nil
		})
		if err == nil && n != records {
			err = fmt.Errorf("%d versions left, want %d", n, records)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConflictPolicies: the policies by type, as GET /v1/capabilities
// shows them; under lww a stale write with paths still replaces the
// whole data, under reject it is refused whole, without paths.
func TestConflictPolicies(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		cfg.Conflicts = map[string]Policy{"tasks": PolicyLWW, "events": PolicyMerge}
		cfg.RejectConflicts = []string{"notes"}
		h := setup(t, cfg)

		caps := h.must(t, "GET", "/v1/capabilities", "alice", "", "")
		var ans struct {
			Conflicts struct {
				Default Policy            `json:"default"`
				Types   map[string]Policy `json:"types"`
			} `json:"conflicts"`
			Versions bool `json:"versions"`
			Changes  bool `json:"changes"`
		}
		if caps.status != http.StatusOK || json.Unmarshal([]byte(caps.body), &ans) != nil || !ans.Versions || !ans.Changes ||
			ans.Conflicts.Default != PolicyMerge ||
			!reflect.DeepEqual(ans.Conflicts.Types, map[string]Policy{"tasks": PolicyLWW, "events": PolicyMerge, "notes": PolicyReject}) {
			t.Fatalf("capabilities: %d %s", caps.status, caps.body)
		}

		for _, typ := range []string{"tasks", "notes"} {
			e := h.createOne(t, "alice", typ, "c", `{"a":1,"b":1}`)
			h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", newKey(), mergeBody(`{"a":2,"b":1}`, 1, "/a")) // 2
			r := h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", newKey(), mergeBody(`{"a":1,"b":3}`, 1, "/b"))
			switch typ {
			case "tasks": // lww: the whole data, stale a included
				if got := entityOf(t, r); r.status != http.StatusOK || got.Version != 3 || string(got.Data) != `{"a":1,"b":3}` {
					t.Fatalf("lww: %d %s", r.status, r.body)
				}
			case "notes": // reject: refused whole, no field detail
				if c := conflictOf(t, r); c.Paths != nil || c.Base != nil || c.Current.Version != 2 {
					t.Fatalf("reject: %s", r.body)
				}
				if r := h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{"z":1}}`); r.status != http.StatusOK ||
					string(entityOf(t, r).Data) != `{"a":2,"b":1}` {
					t.Fatalf("reject: a create of a live clientId merged: %d %s", r.status, r.body)
				}
			}
		}
	})
}

// TestNewRefusesBadPolicy: New refuses a policy it does not know;
// ParsePolicies reads the --conflicts syntax.
func TestNewRefusesBadPolicy(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{Path: filepath.Join(t.TempDir(), "remote.db"), DevTokens: true, Conflicts: map[string]Policy{"*": "mine"}}); err == nil {
		t.Fatal("New accepted policy \"mine\"")
	}
	tests := []struct {
		in   string
		want map[string]Policy
		err  bool
	}{
		{"", map[string]Policy{}, false},
		{"lww", map[string]Policy{"*": PolicyLWW}, false},
		{"notes=reject, *=lww,tasks=merge", map[string]Policy{"notes": PolicyReject, "*": PolicyLWW, "tasks": PolicyMerge}, false},
		{"notes=first", nil, true},
		{"=merge", nil, true},
		{"no tes=merge", nil, true},
	}
	for _, tt := range tests {
		got, err := ParsePolicies(tt.in)
		if (err != nil) != tt.err || !tt.err && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePolicies(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// TestServerCommandConflicts: `syncd server --conflicts --history` set
// the policies and the history; a bad policy, a negative history and a
// malformed history age are usage errors.
func TestServerCommandConflicts(t *testing.T) {
	t.Parallel()
	bin := syncdBinary(t)
	for _, args := range [][]string{{"--conflicts", "notes=first"}, {"--history", "-1"}, {"--history-age", "soon"}} {
		cmd := exec.Command(bin, append([]string{"server", "--data-dir", t.TempDir(), "--dev-tokens"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), args[0]) {
			t.Errorf("syncd server %q: %v\n%s\nwant exit 2 naming %s", args, err, out, args[0])
		}
	}

	p := startServer(t, nil, "--data-dir", t.TempDir(), "--conflicts", "lww,notes=merge", "--reject-conflicts", "tasks", "--history", "2", "--history-age", "2d")
	h := remoteClient(t)
	caps, err := h.doURL(p.url, "GET", "/v1/capabilities", "alice", "", "")
	if err != nil || !strings.Contains(caps.body, `"conflicts":{"default":"lww","types":{"notes":"merge","tasks":"reject"}}`) {
		t.Fatalf("capabilities: %v %s", err, caps.body)
	}
	r, err := h.doURL(p.url, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"c","data":{"n":0}}`)
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("create: %v %d %s", err, r.status, r.body)
	}
	id := entityOf(t, r).ID
	for v := int64(1); v <= 3; v++ {
		if r, err := h.doURL(p.url, "PATCH", "/v1/notes/"+id, "alice", newKey(), mergeBody(fmt.Sprintf(`{"n":%d}`, v), v, "/n")); err != nil || r.status != http.StatusOK {
			t.Fatalf("update: %v %d %s", err, r.status, r.body)
		}
	}
	vs, err := h.doURL(p.url, "GET", "/v1/notes/"+id+"/versions", "alice", "", "")
	if err != nil || strings.Count(vs.body, `"version"`) != 2 {
		t.Fatalf("versions with --history 2: %v %s", err, vs.body)
	}
	p.stop(t)
}

// TestLWWIgnoresPaths: only the merge policy reads paths; under lww and
// reject they are ignored, whatever they hold (a client that names more
// than a merging server takes is no reason to refuse a whole write).
func TestLWWIgnoresPaths(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		cfg := b.config(t)
		cfg.Conflicts = map[string]Policy{"*": PolicyLWW, "tasks": PolicyReject}
		h := setup(t, cfg)
		for _, typ := range []string{"notes", "tasks"} {
			e := h.createOne(t, "alice", typ, "c", `{"a":1}`)
			r := h.must(t, "PATCH", "/v1/"+typ+"/"+e.ID, "alice", newKey(), mergeBody(`{"a":2}`, 1, "not a pointer", "/a/b"))
			if r.status != http.StatusOK || string(entityOf(t, r).Data) != `{"a":2}` {
				t.Fatalf("%s: %d %s", typ, r.status, r.body)
			}
		}
	})
}
