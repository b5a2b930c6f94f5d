package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
)

// TestUpdateSendsItsFields: an update with Paths sends them beside the
// whole data (an empty list too); one without names none. The answer's
// data is the outcome's.
func TestUpdateSendsItsFields(t *testing.T) {
	rm := newRemote(t, reply(200, `{"id":"srv-1","version":4,"data":{"title":"hi","done":true}}`))
	c := newClient(t, rm, Config{})
	for _, tc := range []struct {
		paths []string
		want  string
	}{
		{[]string{"/title"}, `["/title"]`},
		{[]string{}, `[]`},
		{nil, ``},
	} {
		r := updateReq()
		r.Paths = tc.paths
		o := c.Send(context.Background(), r)
		if o.Decision != Done || string(o.Data) != `{"title":"hi","done":true}` || o.ServerVersion != 4 {
			t.Fatalf("paths %q: outcome %+v (data %s)", tc.paths, o, o.Data)
		}
		reqs := rm.requests()
		var body struct {
			Paths json.RawMessage `json:"paths"`
		}
		if err := json.Unmarshal(reqs[len(reqs)-1].Body, &body); err != nil || string(body.Paths) != tc.want {
			t.Errorf("paths %q sent as %s, want %s (%v)", tc.paths, body.Paths, tc.want, err)
		}
	}
}

// TestConflictAnswerFields: a merging server's 409 carries the record's
// id, the fields in conflict and the base; a malformed list is dropped
// (the conflict is then of the whole record).
func TestConflictAnswerFields(t *testing.T) {
	rm := newRemote(t, reply(409, `{"error":{"code":"version_conflict","message":"m"},"current":{"id":"srv-9","version":5,"data":{"t":"x"}},"paths":["/t"],"base":{"version":3,"data":{"t":"b"}}}`))
	o := newClient(t, rm, Config{}).Send(context.Background(), createReq())
	if o.Decision != Conflict || o.Current == nil || o.Current.ID != "srv-9" || o.Current.Version != 5 ||
		!slices.Equal(o.Current.Paths, []string{"/t"}) || string(o.Current.Base) != `{"t":"b"}` {
		t.Fatalf("conflict %+v (current %+v)", o, o.Current)
	}
	rm = newRemote(t, reply(409, `{"error":{"code":"version_conflict"},"current":{"version":5,"data":{"t":"x"}},"paths":["t"]}`))
	if o := newClient(t, rm, Config{}).Send(context.Background(), updateReq()); o.Current == nil || o.Current.Paths != nil {
		t.Fatalf("a path that is no pointer: %+v", o.Current)
	}
}

// TestVersions: the history read, newest first; 404 is ErrNoVersions.
func TestVersions(t *testing.T) {
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/notes/srv-1/versions" {
			reply(404, `{"error":{"code":"not_found"}}`)(w, r)
			return
		}
		reply(200, `{"items":[{"version":2,"deleted":true,"updatedAt":"2026-12-02T10:00:00Z"},{"version":1,"data":{"a":1},"operationId":"k"}]}`)(w, r)
	})
	c := newClient(t, rm, Config{})
	vs, err := c.Versions(context.Background(), "tok", "notes", "srv-1")
	if err != nil || len(vs) != 2 || !vs[0].Deleted || vs[0].Data != nil || string(vs[1].Data) != `{"a":1}` || vs[1].OperationID != "k" {
		t.Fatalf("versions %+v %v", vs, err)
	}
	if _, err := c.Versions(context.Background(), "tok", "notes", "srv-2"); !errors.Is(err, ErrNoVersions) {
		t.Fatalf("404: %v", err)
	}
	rm = newRemote(t, reply(200, `{"items":[{"version":0}]}`))
	if _, err := newClient(t, rm, Config{}).Versions(context.Background(), "tok", "notes", "srv-1"); !errors.Is(err, ErrInvalidResponse) {
		t.Fatalf("a version without its number: %v", err)
	}
}
