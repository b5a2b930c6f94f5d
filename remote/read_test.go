package remote

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/syncd/syncd/internal/clocktest"
)

// readOne is the single-record read: GET /v1/{type}?clientId=X.
func (h *harness) readOne(t *testing.T, actor, typ, clientID string) []map[string]json.RawMessage {
	t.Helper()
	r := h.must(t, "GET", "/v1/"+typ+"?clientId="+clientID, actor, "", "")
	var ans struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &ans) != nil || ans.Items == nil {
		t.Fatalf("read of %s: %d %s", clientID, r.status, r.body)
	}
	return ans.Items
}

func field[T any](t *testing.T, rec map[string]json.RawMessage, name string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec[name], &v); err != nil {
		t.Fatalf("%s of %v: %v", name, rec, err)
	}
	return v
}

// TestSingleRecordRead: GET /v1/{type}?clientId=X, the remote protocol's
// read of one record (the daemon's refresh), on both storages: nothing
// under a client id never used; the record at its latest version; a
// tombstone as deleted with its version and no data; nothing once the
// tombstone is swept; the record created again under that client id
// (a new server id, version 1), which the feed brings as a change with
// the new id.
func TestSingleRecordRead(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clock := clocktest.New()
		cfg := b.config(t)
		cfg.Now = clock.Now
		h := setup(t, cfg)
		if got := h.readOne(t, "alice", "notes", "n1"); len(got) != 0 {
			t.Fatalf("never created: %v", got)
		}
		e := entityOf(t, h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"n1","data":{"v":1}}`))
		h.must(t, "PATCH", "/v1/notes/"+e.ID, "alice", newKey(), `{"data":{"v":2}}`)
		got := h.readOne(t, "alice", "notes", "n1")
		if len(got) != 1 || field[string](t, got[0], "id") != e.ID || field[int64](t, got[0], "version") != 2 ||
			string(got[0]["data"]) != `{"v":2}` || field[string](t, got[0], "clientId") != "n1" {
			t.Fatalf("a live record: %v", got)
		}
		if got := h.readOne(t, "bob", "notes", "n1"); len(got) != 0 {
			t.Fatalf("another actor's record: %v", got)
		}
		if got := h.readOne(t, "alice", "tasks", "n1"); len(got) != 0 {
			t.Fatalf("another type's record: %v", got)
		}

		del := h.must(t, "DELETE", "/v1/notes/"+e.ID, "alice", newKey(), "")
		got = h.readOne(t, "alice", "notes", "n1")
		if len(got) != 1 || !field[bool](t, got[0], "deleted") || field[int64](t, got[0], "version") != 3 || field[string](t, got[0], "id") != e.ID {
			t.Fatalf("a tombstone: %v", got)
		}
		if _, ok := got[0]["data"]; ok {
			t.Fatalf("a tombstone answers data: %v", got)
		}
		// The same shape by server id and in the delete's answer.
		for what, body := range map[string]string{"get": h.must(t, "GET", "/v1/notes/"+e.ID, "alice", "", "").body, "delete": del.body} {
			var rec map[string]json.RawMessage
			if json.Unmarshal([]byte(body), &rec) != nil || rec["data"] != nil || string(rec["deleted"]) != "true" {
				t.Fatalf("%s of a tombstone: %s", what, body)
			}
		}

		_, cursor := h.readAll(t, "alice", "", 100)
		if n := sweepAll(t, h, clock); n != 1 {
			t.Fatalf("swept %d, want 1", n)
		}
		if got := h.readOne(t, "alice", "notes", "n1"); len(got) != 0 {
			t.Fatalf("a swept tombstone: %v", got)
		}
		if r := h.must(t, "GET", "/v1/notes/"+e.ID, "alice", "", ""); r.status != http.StatusNotFound {
			t.Fatalf("get of a swept record: %d %s", r.status, r.body)
		}
		if r := h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", ""); r.status != http.StatusOK {
			t.Fatalf("the cursor at the head, past the tombstone, after its sweep: %d %s", r.status, r.body)
		}

		// Created again: another record, with a new server id.
		again := h.must(t, "POST", "/v1/notes", "alice", newKey(), `{"clientId":"n1","data":{"v":"new"}}`)
		n := entityOf(t, again)
		if again.status != http.StatusCreated || n.ID == e.ID || n.Version != 1 {
			t.Fatalf("create after the sweep: %d %s", again.status, again.body)
		}
		got = h.readOne(t, "alice", "notes", "n1")
		if len(got) != 1 || field[string](t, got[0], "id") != n.ID || field[int64](t, got[0], "version") != 1 || string(got[0]["data"]) != `{"v":"new"}` {
			t.Fatalf("the record created again: %v", got)
		}
		p := pageOf(t, h.must(t, "GET", "/v1/changes?after="+cursor, "alice", "", ""))
		if len(p.Changes) != 1 || p.Changes[0].ID != n.ID || p.Changes[0].ClientID != "n1" || p.Changes[0].Version != 1 || p.Changes[0].Deleted {
			t.Fatalf("the feed after the create again: %+v", p)
		}
		if full, _ := h.readAll(t, "alice", "", 100); len(full) != 1 || full["n1"].ID != n.ID {
			t.Fatalf("a full read: %v", full)
		}
	})
}
