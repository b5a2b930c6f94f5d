package localapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// putSession sends PUT /v1/session and returns the status and the error
// code, if any.
func putSession(t *testing.T, e *localapitest.Env, account, token string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"accountId": account, "accessToken": token})
	r, err := http.NewRequest("PUT", e.URL+"/v1/session", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	r.Close = true
	r.Header.Set("Authorization", "Bearer "+localapitest.Token)
	r.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(raw, &out)
	return res.StatusCode, out.Error.Code
}

// A token net/http cannot send ("alice.dev\n", as a stray newline from a
// file read would leave) is refused at PUT /v1/session with 400 and
// nothing written. One that got into the data file anyway (an earlier
// version accepted it) is the session's fault, never the operations':
// sending pauses with session.refresh_needed, nothing fails, and a
// corrected token sends everything. Real daemon, API and reference
// server.
func TestUnsendableTokenRefreshesTheSession(t *testing.T) {
	t.Parallel()
	e := localapitest.Start(t, localapitest.Options{
		Drain:         true,
		StoredSession: &queue.Session{AccountID: "alice", AccessToken: "alice.dev\n"},
	})
	seq := e.Bus.LastSeq()
	for _, bad := range []string{"alice.dev\n", "alice.dev\r\nX-Evil: 1", "alice\x00dev", "alice dev", "alice.dév"} {
		if status, code := putSession(t, e, "alice", bad); status != 400 || code != "invalid_request" {
			t.Errorf("PUT /v1/session with token %q: %d %s, want 400 invalid_request", bad, status, code)
		}
	}
	if got := e.Bus.LastSeq(); got != seq {
		t.Fatalf("refused sessions wrote %d events", got-seq)
	}

	conn := mustDial(t, e, wsOpts{query: fmt.Sprintf("since=%d", seq)})
	for i := range 3 {
		createNote(t, e, i)
	}
	for {
		ev := readEvent(t, conn)
		if ev.Type == queue.EventOperationState && ev.State == queue.StatePermanentFailed {
			t.Fatalf("operation failed for the session's token: %+v", ev)
		}
		if ev.Type == daemon.EventSessionRefreshNeeded {
			if !strings.Contains(string(ev.Data), transport.CodeInvalidToken) {
				t.Errorf("refresh_needed data %s, want reason %s", ev.Data, transport.CodeInvalidToken)
			}
			break
		}
	}
	st := api(t, e, "GET", "/v1/status", "")
	counts, _ := st["counts"].(map[string]any)
	if st["paused"] != true || st["pauseReason"] != daemon.PauseSessionRefreshNeeded || counts["permanent_failed"] != 0.0 {
		t.Fatalf("status %v", st)
	}

	if status, code := putSession(t, e, "alice", "alice.dev"); status != 200 {
		t.Fatalf("PUT /v1/session with the corrected token: %d %s", status, code)
	}
	done := 0
	for done < 3 {
		ev := readEvent(t, conn)
		switch {
		case ev.Type == queue.EventOperationState && ev.State == queue.StateDone:
			done++
		case ev.Type == queue.EventOperationState && ev.State == queue.StatePermanentFailed:
			t.Fatalf("operation failed: %+v", ev)
		}
	}
	for i := range 3 {
		recs, err := e.Remote.Entities(context.Background(), "alice", "note", fmt.Sprintf("n%d", i))
		if err != nil || len(recs) != 1 {
			t.Fatalf("server holds %d records of n%d (%v)", len(recs), i, err)
		}
	}
	// No attempt was counted for the sends that never left.
	op := api(t, e, "GET", "/v1/operations?limit=1", "")
	if items, _ := op["items"].([]any); len(items) == 1 {
		if n := items[0].(map[string]any)["attemptCount"]; n != 1.0 {
			t.Errorf("attemptCount %v after one real send, want 1", n)
		}
	}
}
