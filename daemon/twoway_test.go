package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/clocktest"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// Two-way sync, end to end: two daemons (two data files, one account)
// and the reference server on real HTTP over loopback, real clocks for
// the daemons (long polls and backoff wait on real timers), an injected
// one for the server (tombstone expiry).

type twoWay struct {
	t      *testing.T
	srv    *remote.Server
	clock  *clocktest.Clock // the server's
	url    string
	shared string // a data directory root
}

type device struct {
	t      *testing.T
	name   string
	store  *queue.Store
	d      *Daemon
	events *eventLog
	client *transport.Client
	path   string
	cfg    Config
	url    string // the remote the device talks to (default the server)
	// maxDataBytes is the store's data limit (0: the default).
	maxDataBytes int
}

func newTwoWay(t *testing.T, rcfg remote.Config) *twoWay {
	t.Helper()
	w := &twoWay{t: t, clock: clocktest.At(time.Now().UTC()), shared: t.TempDir()}
	rcfg.Path = filepath.Join(w.shared, "remote.db")
	rcfg.DevTokens = true
	rcfg.Now = w.clock.Now
	srv, err := remote.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	w.srv, w.url = srv, hs.URL
	return w
}

// device opens a data file for name (kept across restarts of the
// device) and starts a daemon signed in as alice, pulling.
func (w *twoWay) device(name string, cfg Config) *device {
	w.t.Helper()
	dv := &device{t: w.t, name: name, events: newEventLog(), path: filepath.Join(w.shared, name+".db"), cfg: cfg}
	dv.start(w.url)
	return dv
}

func (dv *device) start(url string) {
	t := dv.t
	t.Helper()
	var err error
	if dv.url != "" {
		url = dv.url
	}
	dv.store, err = queue.Open(dv.path, queue.Config{OnCommit: dv.events.add, NoSync: true, MaxDataBytes: dv.maxDataBytes})
	if err != nil {
		t.Fatal(err)
	}
	dv.client, err = transport.New(transport.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dv.cfg
	cfg.Store, cfg.Transport, cfg.Logger = dv.store, dv.client, testLogger(t)
	if cfg.Pull == "" {
		cfg.Pull = PullOn
	}
	if cfg.PullWait == 0 {
		cfg.PullWait = 20 * time.Second
	}
	dv.d, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := dv.d.SetSession(context.Background(), "alice", "alice."+dv.name); err != nil {
		t.Fatal(err)
	}
	if err := dv.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dv.stop) // stop is safe twice
}

func (dv *device) stop() {
	if dv.d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dv.d.Stop(ctx)
	dv.client.CloseIdleConnections()
	if err := dv.store.Check(); err != nil {
		dv.t.Errorf("%s: queue invariants: %v", dv.name, err)
	}
	dv.store.Close()
	dv.d = nil
}

func (dv *device) write(op queue.OpType, id, data string) queue.Result {
	dv.t.Helper()
	w := queue.Write{Op: op, AccountID: "alice", EntityType: "note", EntityID: id}
	if data != "" {
		w.Data = json.RawMessage(data)
	}
	r, err := dv.store.Apply(context.Background(), w)
	if err != nil {
		dv.t.Fatalf("%s: %s %s: %v", dv.name, op, id, err)
	}
	dv.d.Notify()
	return r
}

// live returns the device's live entities (id → data).
func (dv *device) live() map[string]string {
	dv.t.Helper()
	out := map[string]string{}
	after := ""
	for {
		es, next, err := dv.store.ListEntities("alice", "note", queue.ListOptions{Limit: 500, After: after})
		if err != nil {
			dv.t.Fatal(err)
		}
		for _, e := range es {
			var v any
			json.Unmarshal(e.Data, &v)
			b, _ := json.Marshal(v)
			out[e.ID] = string(b)
		}
		if next == "" {
			return out
		}
		after = next
	}
}

// waitFor waits until cond holds on the device, woken by its commits.
func (dv *device) waitFor(what string, cond func() bool) {
	dv.t.Helper()
	dv.events.wait(dv.t, dv.name+": "+what, func([]queue.Event) bool { return cond() })
}

func (dv *device) entity(id string) (queue.Entity, bool) {
	e, err := dv.store.GetEntity("alice", "note", id)
	if errors.Is(err, queue.ErrEntityNotFound) {
		return e, false
	}
	if err != nil {
		dv.t.Fatal(err)
	}
	return e, true
}

// serverLive is the server's live set (clientId → data).
func (w *twoWay) serverLive() map[string]string {
	w.t.Helper()
	es, err := w.srv.Entities(context.Background(), "alice", "note", "")
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range es {
		if !e.Deleted {
			var v any
			json.Unmarshal(e.Data, &v)
			b, _ := json.Marshal(v)
			out[e.ClientID] = string(b)
		}
	}
	return out
}

func (w *twoWay) record(id string) remote.Entity {
	w.t.Helper()
	es, err := w.srv.Entities(context.Background(), "alice", "note", id)
	if err != nil || len(es) != 1 {
		w.t.Fatalf("server records of %s: %v %v", id, es, err)
	}
	return es[0]
}

func (dv *device) synced() bool {
	st, err := dv.store.StatsFor("alice")
	if err != nil || st.Account == nil {
		return false
	}
	return st.Account.Counts[queue.StatePending]+st.Account.Counts[queue.StateSending]+st.Account.Counts[queue.StateRetryWaiting] == 0
}

// TestTwoDevicesBootstrapAndLive: a fresh device bootstraps to exactly
// the other's live set; a live write on A reaches B, and B's edit and
// delete reach A, each as remote-origin events.
func TestTwoDevicesBootstrapAndLive(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	for i := range 30 {
		a.write(queue.OpCreate, fmt.Sprintf("n%02d", i), fmt.Sprintf(`{"i":%d}`, i))
	}
	a.write(queue.OpUpdate, "n03", `{"i":"three"}`)
	a.write(queue.OpDelete, "n04", "")
	a.waitFor("everything sent", a.synced)

	b := w.device("B", Config{})
	want := a.live()
	b.waitFor("bootstrapped to A's live set", func() bool { return reflect.DeepEqual(b.live(), want) })
	if e, _ := b.entity("n03"); e.SyncState != queue.SyncSynced || e.ServerVersion != 2 || e.ServerID == "" {
		t.Fatalf("B's n03: %+v", e)
	}
	if st, _ := b.d.Status(context.Background()); st.Pull.Received < 30 {
		t.Fatalf("B's pull status: %+v", st.Pull)
	}

	// Live: A writes, B sees it.
	a.write(queue.OpCreate, "live", `{"from":"A"}`)
	b.waitFor("A's live write", func() bool { _, ok := b.entity("live"); return ok })
	remoteEvent := false
	b.events.mu.Lock()
	for _, ev := range b.events.events {
		if ev.Type == queue.EventEntityChanged && ev.EntityID == "live" && string(ev.Data) == `{"origin":"remote"}` {
			remoteEvent = true
		}
	}
	b.events.mu.Unlock()
	if !remoteEvent {
		t.Fatal("no entity.changed event with origin remote on B")
	}
	// B edits and deletes; A sees both.
	b.write(queue.OpUpdate, "live", `{"from":"B"}`)
	b.write(queue.OpDelete, "n05", "")
	a.waitFor("B's edit and delete", func() bool {
		e, ok := a.entity("live")
		_, still := a.entity("n05")
		return ok && string(e.Data) == `{"from":"B"}` && !still
	})
	b.waitFor("B sent", b.synced)
	a.waitFor("A settled", func() bool { return reflect.DeepEqual(a.live(), b.live()) })
	if !reflect.DeepEqual(a.live(), w.serverLive()) {
		t.Fatalf("A %v, server %v", a.live(), w.serverLive())
	}
	// B's own writes came back as echoes and changed nothing there.
	if e, _ := b.entity("live"); e.SyncState != queue.SyncSynced || string(e.Data) != `{"from":"B"}` {
		t.Fatalf("B's live after its own echo: %+v", e)
	}
}

// TestTwoDevicesConcurrentEditsConverge: A and B edit one entity while
// both are stopped (offline); when both are back, last writer wins on
// the server, both writes are applied there (the version counts both),
// and both devices end with the server's record.
func TestTwoDevicesConcurrentEditsConverge(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{Conflicts: map[string]remote.Policy{"*": remote.PolicyLWW}}) // the same field on both: last writer wins
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":0}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("bootstrapped", func() bool { _, ok := b.entity("x"); return ok })

	a.stop()
	b.stop()
	for _, dv := range []*device{a, b} {
		s, err := queue.Open(dv.path, queue.Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(context.Background(), queue.Write{Op: queue.OpUpdate, AccountID: "alice", EntityType: "note", EntityID: "x",
			Data: json.RawMessage(`{"by":"` + dv.name + `"}`)}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	a.start(w.url)
	b.start(w.url)
	for _, dv := range []*device{a, b} {
		dv.waitFor("converged on the server's record", func() bool {
			e, ok := dv.entity("x")
			rec := w.record("x")
			return ok && dv.synced() && e.SyncState == queue.SyncSynced && e.ServerVersion == rec.Version &&
				reflect.DeepEqual(dv.live()["x"], w.serverLive()["x"])
		})
	}
	if rec := w.record("x"); rec.Version != 3 {
		t.Fatalf("server version %d, want 3: the create and BOTH edits applied", rec.Version)
	}
}

// TestTwoDevicesRejectConflictAndResolve: with the reject policy, the
// later of two concurrent edits turns conflict with the server's record
// beside it; resolving it (take server) brings both devices to one
// state; a resolution taking local wins on the server.
func TestTwoDevicesRejectConflictAndResolve(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{RejectConflicts: []string{"note"}})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":0}`)
	a.write(queue.OpCreate, "y", `{"v":0}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("bootstrapped", func() bool { return len(b.live()) == 2 })

	b.stop() // B offline
	b.store, _ = queue.Open(b.path, queue.Config{NoSync: true, OnCommit: b.events.add})
	for _, id := range []string{"x", "y"} {
		if _, err := b.store.Apply(context.Background(), queue.Write{Op: queue.OpUpdate, AccountID: "alice", EntityType: "note", EntityID: id,
			Data: json.RawMessage(`{"by":"B"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	b.store.Close()
	for _, id := range []string{"x", "y"} {
		a.write(queue.OpUpdate, id, `{"by":"A"}`)
	}
	a.waitFor("A's edits sent", a.synced)
	b.start(w.url)
	for _, id := range []string{"x", "y"} {
		b.waitFor(id+" in conflict", func() bool {
			e, _ := b.entity(id)
			// Updates are merge patches: {"v":0} stays.
			return e.SyncState == queue.SyncConflict && e.Server != nil && string(e.Server.Data) == `{"by":"A","v":0}` &&
				string(e.Data) == `{"by":"B","v":0}`
		})
	}
	// x: take the server's; y: keep B's.
	if _, _, err := b.store.Resolve(context.Background(), "alice", "note", "x", queue.TakeServer, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.Resolve(context.Background(), "alice", "note", "y", queue.TakeLocal, ""); err != nil {
		t.Fatal(err)
	}
	b.d.Notify()
	b.waitFor("resolutions sent", b.synced)
	want := map[string]string{"x": `{"by":"A","v":0}`, "y": `{"by":"B","v":0}`}
	for _, dv := range []*device{a, b} {
		dv.waitFor("one state", func() bool { return reflect.DeepEqual(dv.live(), want) && dv.synced() })
	}
	if !reflect.DeepEqual(w.serverLive(), want) {
		t.Fatalf("server %v", w.serverLive())
	}
}

// TestTwoDevicesCursorExpired: B is away while A deletes a record and
// the server sweeps its tombstone; B's cursor is then expired, B reads
// everything again and removes the record, but keeps its own unsent
// work.
func TestTwoDevicesCursorExpired(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "kept", `{}`)
	a.write(queue.OpCreate, "gone", `{}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("bootstrapped", func() bool { return len(b.live()) == 2 })
	b.stop()

	a.write(queue.OpDelete, "gone", "")
	a.waitFor("sent", a.synced)
	w.clock.Advance(remote.DefaultTombstoneRetention + time.Hour)
	if n, err := w.srv.SweepTombstones(context.Background()); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	// B made a local entity while away, never sent.
	s, err := queue.Open(b.path, queue.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: "mine", Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b.start(w.url)
	b.waitFor("re-bootstrapped", func() bool {
		_, gone := b.entity("gone")
		_, mine := b.entity("mine")
		_, kept := b.entity("kept")
		return !gone && mine && kept
	})
	b.waitFor("sent", b.synced)
	if !reflect.DeepEqual(b.live(), w.serverLive()) {
		t.Fatalf("B %v, server %v", b.live(), w.serverLive())
	}
}
