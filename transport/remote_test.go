package transport_test

import (
	"net/http/httptest"
	"testing"

	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// TestAgainstReferenceServer runs the protocol against the reference
// server: create, replay, key reuse with another payload, update, delete,
// delete replay, update of a deleted entity, delete of an unknown id.
func TestAgainstReferenceServer(t *testing.T) {
	t.Parallel()
	srv, err := remote.New(remote.Config{DataDir: t.TempDir(), DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	c, err := transport.New(transport.Config{BaseURL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)

	send := func(step string, r transport.Request, want transport.Decision, code string, replayed bool) transport.Outcome {
		t.Helper()
		o := c.Send(t.Context(), r)
		if o.Decision != want || o.Code != code || o.Replayed != replayed {
			t.Fatalf("%s: got %v/%q replayed=%v (status %d, %s), want %v/%q replayed=%v",
				step, o.Decision, o.Code, o.Replayed, o.Status, o.Body, want, code, replayed)
		}
		return o
	}

	create := transport.Request{
		OperationID: "op-create", Op: transport.OpCreate, EntityType: "notes", EntityID: "local-1",
		Data: []byte(`{"title":"a"}`), PayloadVersion: 1, Token: "alice.1",
	}
	first := send("create", create, transport.Done, "", false)
	if first.ServerID == "" || first.Status != 201 {
		t.Fatalf("create: server id %q, status %d", first.ServerID, first.Status)
	}
	again := send("create replay", create, transport.Done, "", true)
	if again.ServerID != first.ServerID {
		t.Fatalf("replay server id %q, want %q", again.ServerID, first.ServerID)
	}
	reused := create
	reused.Data = []byte(`{"title":"b"}`)
	send("key reused", reused, transport.Permanent, transport.CodePayloadConflict, false)

	update := transport.Request{
		OperationID: "op-update", Op: transport.OpUpdate, EntityType: "notes", EntityID: "local-1",
		ServerID: first.ServerID, Data: []byte(`{"title":"c"}`), PayloadVersion: 2, Token: "alice.1",
	}
	send("update", update, transport.Done, "", false)

	del := transport.Request{
		OperationID: "op-delete", Op: transport.OpDelete, EntityType: "notes", EntityID: "local-1",
		ServerID: first.ServerID, Token: "alice.2",
	}
	send("delete", del, transport.Done, "", false)
	send("delete replay", del, transport.Done, "", true)

	late := update
	late.OperationID, late.PayloadVersion = "op-update-2", 3
	send("update after delete", late, transport.Permanent, transport.CodeGone, false)

	unknown := del
	unknown.OperationID, unknown.ServerID = "op-delete-2", "no-such-id"
	send("delete unknown", unknown, transport.Done, transport.CodeNotFound, false)

	other := create
	other.OperationID, other.Token = "op-other", "bob.1"
	if o := send("other actor", other, transport.Done, "", false); o.ServerID == first.ServerID {
		t.Errorf("bob's create got alice's record %q", o.ServerID)
	}
}
