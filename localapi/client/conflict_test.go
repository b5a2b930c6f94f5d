package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
)

// conflictEnv is a signed-in API draining to the reference server (its
// default policy merges field by field), with a subscription to the
// entity's events and a second device that writes to the server
// directly.
type conflictEnv struct {
	t   *testing.T
	e   *localapitest.Env
	c   *client.Client
	sub *client.Subscription
}

func startConflictEnv(t *testing.T) *conflictEnv {
	t.Helper()
	e := localapitest.Start(t, localapitest.Options{Account: "alice", Drain: true})
	c := newClient(t, e.Addr)
	sub, err := c.Subscribe(t.Context(), client.SubscribeOptions{Since: e.Bus.LastSeq()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return &conflictEnv{t: t, e: e, c: c, sub: sub}
}

// waitFor reads events until one matches.
func (ce *conflictEnv) waitFor(what string, match func(client.Event) bool) client.Event {
	ce.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ev, err := ce.sub.Next(ctx)
		if err != nil {
			ce.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(ev) {
			return ev
		}
	}
}

// done waits until operation id is done.
func (ce *conflictEnv) done(id string) {
	ce.t.Helper()
	ce.waitFor("operation "+id+" done", func(ev client.Event) bool {
		return ev.Type == "operation.state" && ev.OperationID == id && ev.State == "done"
	})
}

// synced creates note id with data and waits until the server has it;
// it returns the entity as synced.
func (ce *conflictEnv) synced(id string, data map[string]any) client.Entity {
	ce.t.Helper()
	n, err := ce.c.Create(ce.t.Context(), "note", id, data)
	if err != nil {
		ce.t.Fatal(err)
	}
	ce.done(n.OperationID)
	got, err := ce.c.Get(ce.t.Context(), "note", id)
	if err != nil || got.SyncState != "synced" || got.ServerID == "" || got.ServerVersion != 1 {
		ce.t.Fatalf("%s after its create: %+v %v", id, got, err)
	}
	return got
}

// otherDevice updates the server's record of n as another device of
// alice would: the fields paths of data, made on version base.
func (ce *conflictEnv) otherDevice(n client.Entity, data map[string]any, paths []string, base int64) {
	ce.t.Helper()
	body, err := json.Marshal(map[string]any{"data": data, "paths": paths, "baseVersion": base, "payloadVersion": 1})
	if err != nil {
		ce.t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPatch, "/v1/note/"+n.ServerID, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer alice.other-device")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	rec := httptest.NewRecorder()
	ce.e.Remote.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		ce.t.Fatalf("the other device's update: %d %s", rec.Code, rec.Body)
	}
}

// conflict makes note id conflict field by field: the other device set
// title to "Shopping" on version 1, this one title "Food" and done true;
// it returns the entity in conflict and the event that said so.
func (ce *conflictEnv) conflict(id string) (client.Entity, client.Event) {
	ce.t.Helper()
	ctx := ce.t.Context()
	n := ce.synced(id, map[string]any{"title": "Groceries", "done": false, "tags": "home"})
	ce.otherDevice(n, map[string]any{"title": "Shopping", "done": false, "tags": "home"}, []string{"/title"}, 1)
	u, err := ce.c.Update(ctx, "note", id, map[string]any{"title": "Food", "done": true})
	if err != nil {
		ce.t.Fatal(err)
	}
	op, err := ce.c.Operation(ctx, u.OperationID)
	if err != nil || !slices.Equal(op.Paths, []string{"/done", "/title"}) {
		ce.t.Fatalf("the update's operation: paths %q, %v", op.Paths, err)
	}
	ev := ce.waitFor(id+" in conflict", func(ev client.Event) bool {
		return ev.Type == "entity.changed" && ev.EntityID == id && ev.SyncState == "conflict"
	})
	got, err := ce.c.Get(ctx, "note", id)
	if err != nil || got.SyncState != "conflict" {
		ce.t.Fatalf("%s: %+v %v", id, got, err)
	}
	return got, ev
}

// TestClientConflictFieldByField: two devices change the same field; the
// entity shows that field only, with its base, local and server values,
// and the event names it. ResolvePaths takes the server's title and
// keeps this device's other change; what it sent is in the record's
// versions.
func TestClientConflictFieldByField(t *testing.T) {
	t.Parallel()
	ce := startConflictEnv(t)
	c, ctx := ce.c, t.Context()

	got, ev := ce.conflict("a")
	if ch := ev.EntityChange(); !slices.Equal(ch.ConflictPaths, []string{"/title"}) {
		t.Fatalf("the conflict's event: %s → %+v", ev.Data, ch)
	}
	want := []client.ConflictPath{{
		Path: "/title", BaseKnown: true,
		Base: json.RawMessage(`"Groceries"`), Local: json.RawMessage(`"Food"`), Server: json.RawMessage(`"Shopping"`),
	}}
	if got.Conflict == nil || !equalConflictPaths(got.Conflict.Paths, want) {
		t.Fatalf("conflict: %+v", got.Conflict)
	}
	if got.Server == nil || got.Server.Version != 2 || !slices.Equal(got.Server.Paths, []string{"/title"}) || len(got.Server.Base) == 0 {
		t.Fatalf("server record: %+v", got.Server)
	}
	if list, err := c.List(ctx, "note", client.ListOptions{SyncState: "conflict"}); err != nil || len(list.Items) != 1 || list.Items[0].Conflict == nil {
		t.Fatalf("a listing of the conflict: %+v %v", list, err)
	}

	for _, sides := range []map[string]string{
		{"/title": "server", "/done": "local"}, // /done is not in conflict
		{"/title": "both"},
		{}, // /title without a side
		nil,
	} {
		var apiErr *client.Error
		if _, err := c.ResolvePaths(ctx, "note", "a", sides); !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != localapi.CodeInvalidRequest {
			t.Fatalf("ResolvePaths(%v): %v", sides, err)
		}
	}
	res, err := c.ResolvePaths(ctx, "note", "a", map[string]string{"/title": client.TakeServer})
	if err != nil || res.SyncState != "pending" || res.OperationID == "" || res.Conflict != nil || res.Server != nil {
		t.Fatalf("ResolvePaths: %+v %v", res, err)
	}
	if !jsonEqual(res.Data, `{"title":"Shopping","done":true,"tags":"home"}`) {
		t.Fatalf("resolved data: %s", res.Data)
	}
	op, err := c.Operation(ctx, res.OperationID)
	if err != nil || !slices.Equal(op.Paths, []string{"/done"}) {
		t.Fatalf("the resolution's operation: paths %q, %v", op.Paths, err)
	}
	ce.done(res.OperationID)
	if got, err = c.Get(ctx, "note", "a"); err != nil || got.SyncState != "synced" || got.ServerVersion != 3 || !jsonEqual(got.Data, string(res.Data)) {
		t.Fatalf("after the resolution reached the server: %+v %v", got, err)
	}
	if _, err := c.ResolvePaths(ctx, "note", "a", map[string]string{"/title": client.TakeLocal}); !client.IsCode(err, localapi.CodeNoConflict) {
		t.Fatalf("ResolvePaths of a synced entity: %v", err)
	}

	vs, err := c.Versions(ctx, "note", "a")
	if err != nil || len(vs) != 3 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	for i, want := range []struct {
		version int64
		data    string
	}{
		{3, `{"title":"Shopping","done":true,"tags":"home"}`},
		{2, `{"title":"Shopping","done":false,"tags":"home"}`},
		{1, `{"title":"Groceries","done":false,"tags":"home"}`},
	} {
		if v := vs[i]; v.Version != want.version || !jsonEqual(v.Data, want.data) || v.Deleted || v.UpdatedAt.IsZero() {
			t.Fatalf("version %d: %+v (%s), want %d %s", i, v, v.Data, want.version, want.data)
		}
	}
	if vs[0].OperationID != res.OperationID {
		t.Fatalf("the newest version was made by %q, not the resolution %q", vs[0].OperationID, res.OperationID)
	}
}

// TestClientResolveData: the app's own merge of a conflict goes out as
// an update; data that is not an object is refused.
func TestClientResolveData(t *testing.T) {
	t.Parallel()
	ce := startConflictEnv(t)
	c, ctx := ce.c, t.Context()
	ce.conflict("b")
	for _, bad := range []any{nil, []int{1}, json.RawMessage(`"text"`)} {
		if _, err := c.ResolveData(ctx, "note", "b", bad); !client.IsCode(err, localapi.CodeInvalidRequest) {
			t.Fatalf("ResolveData(%v): %v", bad, err)
		}
	}
	merged := json.RawMessage(`{"title":"Food & Shopping","done":true,"tags":"home"}`)
	res, err := c.ResolveData(ctx, "note", "b", merged)
	if err != nil || res.SyncState != "pending" || res.OperationID == "" || !jsonEqual(res.Data, string(merged)) {
		t.Fatalf("ResolveData: %+v %v", res, err)
	}
	ce.done(res.OperationID)
	if got, err := c.Get(ctx, "note", "b"); err != nil || got.SyncState != "synced" || !jsonEqual(got.Data, string(merged)) {
		t.Fatalf("after the merged data reached the server: %+v %v", got, err)
	}
	// A whole take still works on a conflict field by field: local keeps
	// this device's changed fields over the server's record.
	ce.conflict("c")
	res, err = c.Resolve(ctx, "note", "c", client.TakeLocal)
	if err != nil || res.OperationID == "" || !jsonEqual(res.Data, `{"title":"Food","done":true,"tags":"home"}`) {
		t.Fatalf("Resolve take local: %+v %v", res, err)
	}
}

// TestClientMergedAnswerEvent: edits of different fields on two devices
// both land; the entity.changed of the server's answer names the field
// it brought in.
func TestClientMergedAnswerEvent(t *testing.T) {
	t.Parallel()
	ce := startConflictEnv(t)
	c, ctx := ce.c, t.Context()
	n := ce.synced("m", map[string]any{"title": "Groceries", "done": false})
	ce.otherDevice(n, map[string]any{"title": "Shopping", "done": false}, []string{"/title"}, 1)
	u, err := c.Update(ctx, "note", "m", map[string]any{"done": true})
	if err != nil {
		t.Fatal(err)
	}
	// The answer's transaction makes both events: the operation done,
	// and the entity's fields merged in.
	var merged *client.Event
	done := false
	ce.waitFor("the merged answer", func(ev client.Event) bool {
		switch {
		case ev.Type == "entity.changed" && ev.EntityID == "m" && ev.EntityChange().Origin == client.OriginAnswer:
			merged = &ev
		case ev.Type == "operation.state" && ev.OperationID == u.OperationID && ev.State == "done":
			done = true
		}
		return merged != nil && done
	})
	if ch := merged.EntityChange(); !slices.Equal(ch.Paths, []string{"/title"}) || ch.ConflictPaths != nil {
		t.Fatalf("the answer's event: %s → %+v", merged.Data, ch)
	}
	if got, err := c.Get(ctx, "note", "m"); err != nil || got.SyncState != "synced" || !jsonEqual(got.Data, `{"title":"Shopping","done":true}`) {
		t.Fatalf("after the merge: %+v %v", got, err)
	}
}

// TestClientVersionsErrors: each failure of a versions read has its
// stable code.
func TestClientVersionsErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// No remote at all: nothing keeps history.
	bare := localapitest.Start(t, localapitest.Options{Account: "alice"})
	c := newClient(t, bare.Addr)
	if _, err := c.Create(ctx, "note", "n", map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	var ae *client.Error
	if _, err := c.Versions(ctx, "note", "n"); !errors.As(err, &ae) || ae.Status != 501 || ae.Code != localapi.CodeVersionsUnsupported {
		t.Fatalf("versions without a remote: %v", err)
	}

	ce := startConflictEnv(t)
	c = ce.c
	if _, err := c.Versions(ctx, "note", "nowhere"); !client.IsCode(err, localapi.CodeNotFound) {
		t.Fatalf("versions of no entity: %v", err)
	}
	// The server refuses the create (its test hook): it never has a
	// record of it.
	bad, err := c.Create(ctx, "note", "refused", map[string]any{"invalid": true})
	if err != nil {
		t.Fatal(err)
	}
	ce.waitFor("the create refused", func(ev client.Event) bool {
		return ev.Type == "operation.state" && ev.OperationID == bad.OperationID && ev.State == "permanent_failed"
	})
	if _, err := c.Versions(ctx, "note", "refused"); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != localapi.CodeNotOnServer {
		t.Fatalf("versions of an entity the server never had: %v", err)
	}
	n := ce.synced("n", map[string]any{"v": 1})
	if vs, err := c.Versions(ctx, "note", n.ID); err != nil || len(vs) != 1 || vs[0].Version != 1 || vs[0].OperationID != n.LastOperationID {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	ce.e.Remote.Close() // the remote's store is closed: reads fail
	if _, err := c.Versions(ctx, "note", n.ID); !errors.As(err, &ae) || ae.Status != 503 || ae.Code != localapi.CodeRemoteUnavailable {
		t.Fatalf("versions without a remote that answers: %v", err)
	}
}

func equalConflictPaths(a, b []client.ConflictPath) bool {
	return slices.EqualFunc(a, b, func(x, y client.ConflictPath) bool {
		return x.Path == y.Path && x.BaseKnown == y.BaseKnown &&
			string(x.Base) == string(y.Base) && string(x.Local) == string(y.Local) && string(x.Server) == string(y.Server)
	})
}

// jsonEqual reports whether got holds the same JSON value as want.
func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
