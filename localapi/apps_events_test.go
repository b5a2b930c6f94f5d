package localapi_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
)

// An app token's event stream, replayed and live, carries its entity
// types' events and those of none, never another app's or queue.totals;
// removing the app closes it with 4401, and the token cannot subscribe
// again.
func TestAppEventsScopeAndRevocation(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	token, _ := api(t, e, "POST", "/v1/apps", `{"name":"notes","types":["note"]}`)["token"].(string)
	api(t, e, "POST", "/v1/entities/task", `{"id":"t0","data":{}}`)
	createNote(t, e, 0)
	auth := http.Header{"Authorization": {"Bearer " + token}}
	sub := mustDial(t, e, wsOpts{query: "since=0", header: auth})
	defer sub.Close()

	api(t, e, "POST", "/v1/entities/task", `{"id":"t1","data":{}}`)
	for _, typ := range []string{daemon.EventQueueTotals, daemon.EventRemoteMisconfigured} {
		if _, err := e.Store.AppendEvent(context.Background(), queue.Event{Type: typ, Data: []byte(`{"seen":"POST /v1/task"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	createNote(t, e, 1)
	var got []string
	for {
		ev := readEvent(t, sub)
		if ev.EntityType == "task" || ev.Type == daemon.EventQueueTotals || ev.Type == daemon.EventRemoteMisconfigured {
			t.Fatalf("the notes app got %+v", ev)
		}
		got = append(got, ev.Type+" "+ev.EntityID+" "+ev.App)
		if ev.Type == queue.EventOperationState && ev.EntityID == "n1" {
			break
		}
	}
	if got[0] != daemon.EventSessionChanged+"  " || !slices.Contains(got, queue.EventEntityChanged+" n0 ") {
		t.Errorf("events %q: want the session's first, and the replay of n0", got)
	}

	api(t, e, "DELETE", "/v1/apps/notes", "")
	_, err := tryReadEvent(sub)
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != localapi.CloseRevoked {
		t.Fatalf("after the app's removal the stream ended with %v, want close %d", err, localapi.CloseRevoked)
	}
	if conn, resp, _ := dialEvents(t, e, wsOpts{header: auth}); conn != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a revoked token subscribed: %v", resp.Status)
	}
}

// An app token's stream carries the entity events of the account signed
// in when each is sent: what another account wrote is not replayed to
// it, and ?account= of another account is refused.
func TestAppEventsFollowTheSignedInAccount(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{Account: "alice"})
	token, _ := api(t, e, "POST", "/v1/apps", `{"name":"notes","types":["note"]}`)["token"].(string)
	createNote(t, e, 1) // alice's
	api(t, e, "PUT", "/v1/session", `{"accountId":"bob","accessToken":"bob.1"}`)
	auth := http.Header{"Authorization": {"Bearer " + token}}
	if conn, resp, _ := dialEvents(t, e, wsOpts{query: "account=alice", header: auth}); conn != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("?account=alice with bob signed in: %v", resp.Status)
	}
	sub := mustDial(t, e, wsOpts{query: "since=0", header: auth})
	defer sub.Close()
	createNote(t, e, 2) // bob's
	for {
		ev := readEvent(t, sub)
		if ev.EntityType != "" && ev.AccountID != "bob" {
			t.Fatalf("the app got %+v of %s", ev, ev.AccountID)
		}
		if ev.Type == queue.EventOperationState && ev.EntityID == "n2" {
			break
		}
	}
}
