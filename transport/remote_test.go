package transport_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// TestAgainstReferenceServer runs the protocol against the reference
// server: create, replay, key reuse with another payload, update, delete,
// delete replay, update of a deleted entity, delete of an unknown id.
func TestAgainstReferenceServer(t *testing.T) {
	t.Parallel()
	c := referenceClient(t, remote.Config{})

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
	send("update after delete", late, transport.Conflict, transport.CodeDeletedOnServer, false)

	unknown := del
	unknown.OperationID, unknown.ServerID = "op-delete-2", "no-such-id"
	send("delete unknown", unknown, transport.Done, transport.CodeNotFound, false)

	other := create
	other.OperationID, other.Token = "op-other", "bob.1"
	if o := send("other actor", other, transport.Done, "", false); o.ServerID == first.ServerID {
		t.Errorf("bob's create got alice's record %q", o.ServerID)
	}
}

// TestCreateNearTheDataLimit: a create whose data is as large as the
// daemon accepts (queue.DefaultMaxDataBytes) gets a reply larger than
// that (the data plus the entity's metadata); the transport reads it whole
// and the create is Done, not a truncated invalid_response.
func TestCreateNearTheDataLimit(t *testing.T) {
	t.Parallel()
	// The default cap covers the largest reply to the largest data: six
	// times it (a server escaping <, > and & as \u003c) plus metadata.
	if transport.DefaultMaxResponseBytes < 6*queue.DefaultMaxDataBytes+64<<10 {
		t.Fatalf("DefaultMaxResponseBytes %d is too small for data of up to %d bytes", transport.DefaultMaxResponseBytes, queue.DefaultMaxDataBytes)
	}
	c := referenceClient(t, remote.Config{
		MaxBodyBytes: queue.DefaultMaxDataBytes + 64<<10, // as the daemon's embedded server
	})

	data := `{"s":"` + strings.Repeat("x", queue.DefaultMaxDataBytes-len(`{"s":""}`)) + `"}`
	o := c.Send(t.Context(), transport.Request{
		OperationID: "op-big", Op: transport.OpCreate, EntityType: "notes", EntityID: "local-big",
		Data: []byte(data), PayloadVersion: 1, Token: "alice.1",
	})
	if o.Decision != transport.Done || o.Status != 201 || o.ServerID == "" {
		t.Fatalf("create of %d bytes of data: %v/%q status %d: %v", len(data), o.Decision, o.Code, o.Status, o.Err)
	}
	if len(o.Body) <= 1<<20 {
		t.Fatalf("the reply is %d bytes; the test wants one over 1 MiB", len(o.Body))
	}
}

// referenceClient starts the reference server (cfg, with dev tokens and a
// temporary data directory) on loopback and returns a client of it.
func referenceClient(t *testing.T, cfg remote.Config) *transport.Client {
	t.Helper()
	cfg.DataDir, cfg.DevTokens = t.TempDir(), true
	srv, err := remote.New(cfg)
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
	return c
}
