package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// End-to-end tests of the divergences of issue 25 (two daemons and the
// reference server on loopback). Each failed before its fix.

// sweep expires and sweeps the server's tombstones.
func (w *twoWay) sweep() int {
	w.t.Helper()
	w.clock.Advance(remote.DefaultTombstoneRetention + time.Hour)
	n, err := w.srv.SweepTombstones(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// offline runs fn on the device's data file while its daemon is stopped.
func (dv *device) offline(fn func(s *queue.Store)) {
	dv.t.Helper()
	dv.stop()
	s, err := queue.Open(dv.path, queue.Config{NoSync: true, OnCommit: dv.events.add})
	if err != nil {
		dv.t.Fatal(err)
	}
	fn(s)
	if err := s.Close(); err != nil {
		dv.t.Fatal(err)
	}
}

func apply(t *testing.T, s *queue.Store, op queue.OpType, id, data string) {
	t.Helper()
	w := queue.Write{Op: op, AccountID: "alice", EntityType: "note", EntityID: id}
	if data != "" {
		w.Data = json.RawMessage(data)
	}
	if _, err := s.Apply(context.Background(), w); err != nil {
		t.Fatalf("%s %s: %v", op, id, err)
	}
}

// TestSweptNewestTombstoneEndsAtAnAcceptedCursor (case 1): the account's
// newest change is a swept tombstone; a new device's full pass must end
// at a cursor the server accepts, not loop 410 → full pass → 410.
func TestSweptNewestTombstoneEndsAtAnAcceptedCursor(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	for _, id := range []string{"n0", "n1", "n2"} {
		a.write(queue.OpCreate, id, `{}`)
	}
	a.waitFor("sent", a.synced)
	a.write(queue.OpDelete, "n2", "")
	a.waitFor("delete sent", a.synced)
	if n := w.sweep(); n != 1 {
		t.Fatalf("swept %d", n)
	}
	b := w.device("B", Config{})
	b.waitFor("bootstrapped", func() bool {
		st, _ := b.store.LoadPullState("alice")
		return st.Bootstrapped && !st.FullPass && len(b.live()) == 2
	})
	st, _ := b.store.LoadPullState("alice")
	if _, err := b.client.Changes(context.Background(), "alice.B", st.Cursor, 10, 0); err != nil {
		t.Fatalf("the cursor the pass ended at (%q): %v", st.Cursor, err)
	}
}

// TestRepeated410sBackOff (case 1, the daemon's side): against a server
// whose full read ends at a cursor it then refuses (410), a 410 right
// after a full pass is not followed by another pass at once: the puller
// backs off (here an hour, so exactly two passes are read).
func TestRepeated410sBackOff(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{
		Pull:   PullOn,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Hour, Max: time.Hour}},
		Rand:   func(n int64) int64 { return n - 1 },
	}})
	var (
		mu    sync.Mutex
		reads int
	)
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if !strings.HasPrefix(r.Path, transport.ChangesPath) {
			return faultproxy.Action{Kind: faultproxy.Forward}
		}
		mu.Lock()
		defer mu.Unlock()
		reads++
		if reads%2 == 0 { // every read after a full pass
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 410}
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	if err := e.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		st, err := e.d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pull.State == PullStateError {
			break
		}
		// The state is set after the read: wait for the next request,
		// or look again shortly.
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		n := len(e.proxy.Log())
		_ = e.proxy.Wait(wctx, func(l []faultproxy.Entry) bool { return len(l) > n })
		wcancel()
		if ctx.Err() != nil {
			mu.Lock()
			t.Fatalf("no backoff after %d reads", reads)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 4 {
		for _, l := range e.proxy.Log() {
			t.Log(l.Path, l.Status)
		}
		t.Fatalf("%d reads before the backoff, want 4 (pass, 410, pass, 410)", reads)
	}
}

// TestRecreatedIDReplacesTheOldRecord (case 3): a record deleted, swept
// and created again under the same client id reaches a device that was
// away and still holds the old one, and the device's next edit goes to
// the new record.
func TestRecreatedIDReplacesTheOldRecord(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":"old"}`)
	for i := range 4 {
		a.write(queue.OpUpdate, "x", `{"n":`+string(rune('1'+i))+`}`)
	}
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x v5", func() bool { e, ok := b.entity("x"); return ok && e.ServerVersion == 5 })
	b.stop()
	a.write(queue.OpDelete, "x", "")
	a.waitFor("deleted", a.synced)
	w.sweep()
	a.write(queue.OpCreate, "x", `{"v":"new"}`)
	a.waitFor("created again", a.synced)
	b.start(w.url)
	b.waitFor("the new record", func() bool {
		e, ok := b.entity("x")
		return ok && e.ServerID == w.record("x").ID && string(e.Data) == `{"v":"new"}` && e.SyncState == queue.SyncSynced
	})
	b.write(queue.OpUpdate, "x", `{"by":"B"}`)
	b.waitFor("B's edit sent", b.synced)
	if e, _ := b.entity("x"); e.SyncState != queue.SyncSynced {
		t.Fatalf("B's edit: %+v", e)
	}
	if got := w.serverLive()["x"]; got != `{"by":"B","v":"new"}` {
		t.Fatalf("server holds %s", got)
	}
}

// TestEditOfSweptRecordIsAConflict (case 5): an offline edit of a record
// deleted and swept elsewhere is answered 404: a conflict
// (deleted_on_server), resolvable, not a ghost that discard leaves
// synced.
func TestEditOfSweptRecordIsAConflict(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":1}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x", func() bool { _, ok := b.entity("x"); return ok })
	b.offline(func(s *queue.Store) { apply(t, s, queue.OpUpdate, "x", `{"by":"B"}`) })
	a.write(queue.OpDelete, "x", "")
	a.waitFor("deleted", a.synced)
	w.sweep()
	b.start(w.url)
	b.waitFor("x in conflict", func() bool {
		e, ok := b.entity("x")
		return ok && e.SyncState == queue.SyncConflict && e.SyncCode == queue.CodeDeletedOnServer && e.Server != nil && e.Server.Deleted
	})
	if _, removed, err := b.store.Resolve(context.Background(), "alice", "note", "x", queue.TakeServer, ""); err != nil || !removed {
		t.Fatalf("take server: %v %v", removed, err)
	}
	if live := b.live(); len(live) != 0 {
		t.Fatalf("B holds %v", live)
	}
}

// TestSameIDCreatedOnTwoDevicesUnderReject (case 6): under reject, B
// creates "today" offline while A creates it online: B's create does
// not overwrite A's silently; B's entity is in conflict with A's record
// beside it.
func TestSameIDCreatedOnTwoDevicesUnderReject(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{RejectConflicts: []string{"note"}})
	a := w.device("A", Config{})
	b := w.device("B", Config{})
	b.offline(func(s *queue.Store) { apply(t, s, queue.OpCreate, "today", `{"text":"B"}`) })
	a.write(queue.OpCreate, "today", `{"text":"A"}`)
	a.waitFor("sent", a.synced)
	b.start(w.url)
	b.waitFor("today in conflict", func() bool {
		e, ok := b.entity("today")
		return ok && e.SyncState == queue.SyncConflict && e.Server != nil && string(e.Server.Data) == `{"text":"A"}`
	})
	if got := w.serverLive()["today"]; got != `{"text":"A"}` {
		t.Fatalf("server holds %s", got)
	}
}

// TestDiscardOfRefusedUpdateOfPulledEntity (case 4): B's update of an
// entity it pulled is refused and discarded; B ends with the server's
// data, synced, not the refused data.
func TestDiscardOfRefusedUpdateOfPulledEntity(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":1}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x", func() bool { _, ok := b.entity("x"); return ok })
	r := b.write(queue.OpUpdate, "x", `{"invalid":true}`) // the reference server's validation hook
	b.waitFor("refused", func() bool { e, _ := b.entity("x"); return e.SyncState == queue.SyncFailed })
	if err := b.store.Discard(context.Background(), r.Operation.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := b.d.RefreshStale(context.Background()); err != nil || n != 1 {
		t.Fatalf("refresh: %d %v", n, err)
	}
	e, _ := b.entity("x")
	if e.SyncState != queue.SyncSynced || string(e.Data) != `{"v":1}` {
		t.Fatalf("after the discard: %+v", e)
	}
}

// TestDeleteVersusEditConflictIsVisible (case 7): under reject, B's
// offline delete meets A's edit: B's entity is readable, listed by
// ?syncState=conflict, and creating the id again sends an update.
func TestDeleteVersusEditConflictIsVisible(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{RejectConflicts: []string{"note"}})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":1}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x", func() bool { _, ok := b.entity("x"); return ok })
	b.offline(func(s *queue.Store) { apply(t, s, queue.OpDelete, "x", "") })
	a.write(queue.OpUpdate, "x", `{"by":"A"}`)
	a.waitFor("sent", a.synced)
	b.start(w.url)
	b.waitFor("x in conflict", func() bool {
		e, ok := b.entity("x")
		return ok && e.Deleted && e.SyncState == queue.SyncConflict
	})
	items, _, err := b.store.ListEntities("alice", "note", queue.ListOptions{SyncState: queue.SyncConflict})
	if err != nil || len(items) != 1 {
		t.Fatalf("conflicts %v %v", items, err)
	}
	b.write(queue.OpCreate, "x", `{"by":"B"}`)
	b.waitFor("sent", b.synced)
	want := map[string]string{"x": `{"by":"B"}`}
	for _, dv := range []*device{a, b} {
		dv.waitFor("one state", func() bool { return reflect.DeepEqual(dv.live(), want) })
	}
}

// TestBiggerPulledVersionIsStale (case 9): a device with a smaller data
// limit shows a bigger pulled version as stale (too_large), never as
// synced with the old data; a refresh after the limit is raised takes it.
func TestBiggerPulledVersionIsStale(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":1}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x", func() bool { _, ok := b.entity("x"); return ok })
	b.stop()
	a.write(queue.OpUpdate, "x", `{"v":"`+strings.Repeat("x", 2000)+`"}`)
	a.waitFor("sent", a.synced)
	b.maxDataBytes = 1000 // B's data limit is smaller than the record
	b.start(w.url)
	b.waitFor("x stale", func() bool {
		e, ok := b.entity("x")
		return ok && e.SyncState == queue.SyncStale && e.SyncCode == queue.StaleTooLarge && string(e.Data) == `{"v":1}`
	})
	b.stop()
	b.maxDataBytes = 0
	b.start(w.url)
	e, removed, err := b.d.Refresh(context.Background(), "note", "x")
	if err != nil || removed || e.ServerVersion != 2 {
		t.Fatalf("refresh with the default limit: %+v %v %v", e, removed, err)
	}
}

// TestPullsFeedReachability (case 10): a device that only pulls shows
// online while its reads succeed, notices an outage from a failed read,
// and reads again as soon as a probe finds the remote back.
func TestPullsFeedReachability(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	px, err := faultproxy.New(w.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	b := &device{t: t, name: "B", events: newEventLog(), path: filepath.Join(w.shared, "B.db"), url: px.URL(),
		cfg: Config{PullWait: time.Second, ProbeInterval: 50 * time.Millisecond}}
	b.start(w.url)
	status := func() Status {
		st, err := b.d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitStatus(t, "idle and online", func() bool { st := status(); return st.Online && st.Pull.State == PullStateIdle })
	px.SetRule(func(faultproxy.Request) faultproxy.Action { return faultproxy.Action{Kind: faultproxy.Reset} })
	waitStatus(t, "offline", func() bool { return !status().Online })
	px.SetRule(nil)
	waitStatus(t, "online and reading again", func() bool { st := status(); return st.Online && st.Pull.State != PullStateError })
}

// waitStatus waits for cond on a daemon's status, which changes without
// a commit (the pull's state), so it looks every 10 ms, up to 30 s.
func waitStatus(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
