package daemon

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// noneFailed checks that no operation failed.
func noneFailed(t *testing.T, s *queue.Store) queue.Stats {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Counts[queue.StatePermanentFailed]; n != 0 {
		t.Fatalf("%d operations failed: %v", n, st.Counts)
	}
	return st
}

// wantMisconfigured checks that the daemon paused with one
// remote_misconfigured status of kind.
func wantMisconfigured(t *testing.T, d *Daemon, kind string, seen ...string) RemoteProblem {
	t.Helper()
	st, err := d.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := st.RemoteProblem
	if !st.Paused || st.PauseReason != PauseRemoteMisconfigured || p == nil || p.Kind != kind || p.Code != PauseRemoteMisconfigured || p.Fix == "" {
		t.Fatalf("status paused=%v reason=%q problem=%+v, want remote_misconfigured %s", st.Paused, st.PauseReason, p, kind)
	}
	for _, s := range seen {
		if !strings.Contains(p.Seen, s) {
			t.Errorf("seen %q does not mention %q", p.Seen, s)
		}
	}
	return *p
}

// A base URL that redirects: every request is answered 301. After three
// different entities in a row, sending pauses with one status saying
// what was seen and how to fix it; nothing fails. The daemon checks
// again with one operation a minute later (then two, ...), and once the
// server stops redirecting everything goes.
func TestRemoteMisconfiguredRedirect(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://sync.example.com"+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer redirector.Close()
	e.proxy.SetTarget(redirector.URL)
	for i := range 6 {
		e.create(fmt.Sprintf("n%d", i), `{"v":1}`)
	}
	e.drain()
	p := wantMisconfigured(t, e.d, MisconfigRedirect, "301", "Location: https://sync.example.com/v1/note", "POST "+e.proxy.URL()+"/v1/note")
	noneFailed(t, e.store)
	sent := len(e.proxy.Log())
	if sent > e.d.conc {
		t.Errorf("%d requests before the pause, want at most one pass (%d)", sent, e.d.conc)
	}
	e.events.wait(t, "remote.misconfigured", func(es []queue.Event) bool {
		for _, ev := range es {
			if ev.Type == EventRemoteMisconfigured && strings.Contains(string(ev.Data), "redirect") {
				return true
			}
		}
		return false
	})

	// Nothing goes before the recheck; at it, one operation goes.
	e.clock.Advance(MisconfigRecheck - time.Second)
	e.drain()
	if n := len(e.proxy.Log()); n != sent {
		t.Fatalf("%d requests before the recheck", n-sent)
	}
	e.clock.Advance(time.Second)
	e.drain()
	if n := len(e.proxy.Log()); n != sent+1 {
		t.Fatalf("recheck sent %d requests, want 1", n-sent)
	}
	again := wantMisconfigured(t, e.d, MisconfigRedirect)
	if wait := again.NextCheckAt.Sub(e.clock.Now()); wait != 2*MisconfigRecheck || !again.Since.Equal(p.Since) {
		t.Errorf("next recheck in %v (since %v), want %v", wait, again.Since, 2*MisconfigRecheck)
	}
	noneFailed(t, e.store)

	// The server is fixed: the next recheck gets through and all goes.
	e.proxy.SetTarget(e.hs.URL)
	e.clock.Advance(2 * MisconfigRecheck)
	e.drain()
	st := noneFailed(t, e.store)
	if st.Counts[queue.StateDone] != 6 {
		t.Fatalf("after the fix: %v", st.Counts)
	}
	if s, _ := e.d.Status(context.Background()); s.Paused || s.RemoteProblem != nil {
		t.Errorf("still paused: %+v", s)
	}
	for i := range 6 {
		e.oneRecord(fmt.Sprintf("n%d", i))
	}
}

// The reference server misrouted: a create route the server does not
// have answers 404 to every create. Sending pauses as route_not_found;
// nothing fails; a restart with the route fixed sends everything.
func TestRemoteMisconfiguredRoute(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{tcfg: transport.Config{Routes: map[string]transport.Routes{"note": {Create: transport.Route{Path: "/api/{type}"}}}}})
	for i := range 5 {
		e.create(fmt.Sprintf("n%d", i), `{"v":1}`)
	}
	e.drain()
	wantMisconfigured(t, e.d, MisconfigRoute, "POST "+e.proxy.URL()+"/api/note", "404")
	noneFailed(t, e.store)

	// Restart with the configuration fixed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.d.Stop(ctx)
	client, err := transport.New(transport.Config{BaseURL: e.proxy.URL(), Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	d, err := New(Config{Store: e.store, Now: e.clock.Now, Transport: client, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop(ctx)
	if st, _ := d.Status(ctx); st.Paused {
		t.Fatalf("a restart starts paused: %+v", st)
	}
	e.clock.Advance(MisconfigRecheck) // the held operations' time
	if _, err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if st := noneFailed(t, e.store); st.Counts[queue.StateDone] != 5 {
		t.Fatalf("after the restart: %v", st.Counts)
	}
}

// One create refused 404 among entities that sync is that operation's
// own failure: held once, then failed (declined) on the second refusal;
// no pause.
func TestRemoteMisconfiguredNeedsManyHeads(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(string(r.Body), `"bad"`) {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 404}
		}
		return faultproxy.Action{}
	})
	bad := e.create("bad", `{"v":"bad"}`)
	e.drain()
	if op := e.wantState(bad.Operation.ID, queue.StateRetryWaiting); op.LastErrorCode != transport.CodeNotFound {
		t.Fatalf("first 404: %s", op.LastErrorCode)
	}
	for i := range 4 {
		e.create(fmt.Sprintf("n%d", i), `{"v":1}`)
	}
	e.clock.Advance(time.Hour)
	e.drain()
	if op := e.wantState(bad.Operation.ID, queue.StatePermanentFailed); !op.Declined || op.LastErrorCode != transport.CodeNotFound {
		t.Fatalf("second 404: declined %v code %s", op.Declined, op.LastErrorCode)
	}
	if st, _ := e.d.Status(context.Background()); st.Paused {
		t.Fatalf("paused for one operation's failure: %+v", st.RemoteProblem)
	}
}

// A TLS server whose certificate the daemon does not trust: every send
// fails the handshake. Sending pauses as tls (not "offline"), nothing
// fails, and a restart that trusts the certificate sends everything.
func TestRemoteMisconfiguredTLS(t *testing.T) {
	t.Parallel()
	clock := newClock()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{Now: clock.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rs, err := remote.New(remote.Config{DataDir: t.TempDir(), DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ts := httptest.NewUnstartedServer(rs.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	run := func(client *http.Client) *Daemon {
		tc, err := transport.New(transport.Config{BaseURL: ts.URL, Client: client, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tc.CloseIdleConnections)
		d, err := New(Config{Store: store, Now: clock.Now, Transport: tc, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Stop(context.Background()) })
		return d
	}
	d := run(&http.Client{Transport: &http.Transport{}}) // trusts the system roots only
	if err := d.SetSession(ctx, "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := store.Apply(ctx, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("n%d", i), Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	wantMisconfigured(t, d, MisconfigTLS, "POST "+ts.URL+"/v1/note", "certificate")
	noneFailed(t, store)

	d.Stop(ctx)
	d = run(ts.Client()) // the certificate is trusted now
	clock.Advance(MisconfigRecheck)
	if _, err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if st := noneFailed(t, store); st.Counts[queue.StateDone] != 4 {
		t.Fatalf("after the restart: %v", st.Counts)
	}
	if err := store.Check(); err != nil {
		t.Error(err)
	}
}
