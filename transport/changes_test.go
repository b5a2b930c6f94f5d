package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestChanges: the feed request (query, token, long poll), a page, and
// each answer that is not one.
func TestChanges(t *testing.T) {
	t.Parallel()
	page := `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":2,"data":{"v":2},"updatedAt":"2026-12-02T10:00:00Z","operationId":"op-1"},
		{"type":"note","id":"s2","clientId":"n2","version":5,"deleted":true,"updatedAt":"2026-12-02T10:00:00Z"}],"cursor":"c2","hasMore":true}`
	rm := newRemote(t, reply(200, page))
	c := newClient(t, rm, Config{})
	got, err := c.Changes(context.Background(), "alice.1", "c1", 5000, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Changes) != 2 || got.Cursor != "c2" || !got.HasMore || got.Changes[0].ClientID != "n1" || got.Changes[0].Version != 2 ||
		string(got.Changes[0].Data) != `{"v":2}` || !got.Changes[1].Deleted || got.Changes[0].OperationID != "op-1" {
		t.Fatalf("page = %+v", got)
	}
	req := rm.requests()[0]
	if req.Method != "GET" || req.RequestURI != "/v1/changes?after=c1&limit=1000&wait=60" || req.Header.Get("Authorization") != "Bearer alice.1" {
		t.Fatalf("request %s %s %v: want the limit and wait clamped", req.Method, req.RequestURI, req.Header.Get("Authorization"))
	}
	// From the beginning: no after; no wait: no wait parameter.
	if _, err := c.Changes(context.Background(), "alice.1", "", 10, 0); err != nil {
		t.Fatal(err)
	}
	if uri := rm.requests()[1].RequestURI; uri != "/v1/changes?limit=10" {
		t.Fatalf("first page request %s", uri)
	}

	tests := []struct {
		name   string
		answer http.HandlerFunc
		want   error
	}{
		{"no feed", reply(404, `{"error":{"code":"not_found","message":"no"}}`), ErrNoFeed},
		{"a list, not a feed", reply(200, `{"items":[],"next":""}`), ErrNoFeed},
		{"changes without a cursor", reply(200, `{"changes":[]}`), ErrNoFeed},
		{"cursor expired", reply(410, `{"error":{"code":"cursor_expired","message":"gone"}}`), ErrCursorExpired},
		{"token refused", reply(401, `{"error":{"code":"unauthorized","message":"no"}}`), ErrUnauthorized},
		{"server error", reply(503, ""), ErrStatus},
		{"a change without a version", reply(200, `{"changes":[{"type":"note","clientId":"n"}],"cursor":"c"}`), ErrInvalidResponse},
	}
	for _, tt := range tests {
		rm := newRemote(t, tt.answer)
		_, err := newClient(t, rm, Config{}).Changes(context.Background(), "alice.1", "c", 10, 0)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := c.Changes(context.Background(), "alice\n", "", 10, 0); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("unsendable token: %v", err)
	}
}

// TestBaseVersionAndServerVersion: updates carry baseVersion in the
// body, deletes as a query parameter; write answers give the record's
// version; a version_conflict carries the server's record.
func TestBaseVersionAndServerVersion(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(200, `{"id":"s1","version":7}`))
	c := newClient(t, rm, Config{})
	upd := Request{OperationID: "op-1", Op: OpUpdate, EntityType: "note", EntityID: "n1", ServerID: "s1", Data: []byte(`{"a":1}`), PayloadVersion: 2, BaseVersion: 6, Token: "t"}
	o := c.Send(context.Background(), upd)
	if o.Decision != Done || o.ServerVersion != 7 {
		t.Fatalf("update: %+v", o)
	}
	if body := string(rm.requests()[0].Body); !strings.Contains(body, `"baseVersion":6`) {
		t.Fatalf("update body %s", body)
	}
	del := upd
	del.Op, del.OperationID, del.Data = OpDelete, "op-2", nil
	c.Send(context.Background(), del)
	if uri := rm.requests()[1].RequestURI; uri != "/v1/note/s1?baseVersion=6" {
		t.Fatalf("delete %s", uri)
	}
	upd.BaseVersion, upd.OperationID = 0, "op-3"
	c.Send(context.Background(), upd)
	if body := string(rm.requests()[2].Body); strings.Contains(body, "baseVersion") {
		t.Fatalf("update without a base version sent %s", body)
	}

	rm = newRemote(t, reply(409, `{"error":{"code":"version_conflict","message":"newer"},"current":{"id":"s1","version":9,"data":{"b":2}}}`))
	o = newClient(t, rm, Config{}).Send(context.Background(), upd)
	if o.Decision != Conflict || o.Code != CodeVersionConflict || o.Current == nil || o.Current.Version != 9 || string(o.Current.Data) != `{"b":2}` {
		t.Fatalf("conflict: %+v (current %+v)", o, o.Current)
	}
}
