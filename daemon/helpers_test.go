package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/internal/clocktest"
	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is the injected clock: time moves only when a test says so.
type fakeClock = clocktest.Clock

func newClock() *fakeClock { return clocktest.New() }

// env is one end-to-end setup: a queue on a fake clock, the reference
// server on loopback, the fault proxy in front of it, a transport
// through the proxy and a daemon.
type env struct {
	t      testing.TB
	clock  *fakeClock
	dir    string
	store  *queue.Store
	remote *remote.Server
	hs     *httptest.Server
	proxy  *faultproxy.Proxy
	client *transport.Client
	d      *Daemon
	events *eventLog
}

type envOpts struct {
	cfg        Config           // daemon config; Store, Now, Transport filled in
	tcfg       transport.Config // BaseURL filled in
	remoteCfg  remote.Config
	account    string // default "alice"; "" with noSession
	noSession  bool
	realClock  bool
	dir        string // data directory (default a new temp dir)
	quietLog   bool
	keepRemote *remote.Server // use this remote instead of a new one
	mergeable  []string       // queue.Config.MergeableTypes
}

// eventLog collects the queue's committed events (OnCommit).
type eventLog struct {
	mu      sync.Mutex
	events  []queue.Event
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(es []queue.Event) {
	l.mu.Lock()
	l.events = append(l.events, es...)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// wait blocks until cond holds for the events so far.
func (l *eventLog) wait(t testing.TB, what string, cond func([]queue.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		l.mu.Lock()
		ok := cond(l.events)
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var _ io.Writer = tbWriter{}

// setup builds an env. Cleanup stops the daemon, checks the queue's
// invariants and closes everything.
func setup(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{t: t, clock: newClock(), dir: o.dir, events: newEventLog()}
	if e.dir == "" {
		e.dir = t.TempDir()
	}
	now := e.clock.Now
	if o.realClock {
		now = time.Now
	}
	var err error
	e.store, err = queue.Open(filepath.Join(e.dir, "syncd.db"), queue.Config{Now: now, OnCommit: e.events.add, NoSync: true, MergeableTypes: o.mergeable})
	if err != nil {
		t.Fatal(err)
	}
	e.remote = o.keepRemote
	if e.remote == nil {
		rc := o.remoteCfg
		if rc.DataDir == "" && rc.Path == "" {
			rc.DataDir = t.TempDir()
		}
		rc.DevTokens = true
		e.remote, err = remote.New(rc)
		if err != nil {
			t.Fatal(err)
		}
	}
	e.hs = httptest.NewServer(e.remote.Handler())
	e.proxy, err = faultproxy.New(e.hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	tc := o.tcfg
	tc.BaseURL = e.proxy.URL()
	if tc.Now == nil {
		tc.Now = now
	}
	e.client, err = transport.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.cfg
	cfg.Store, cfg.Transport = e.store, e.client
	if cfg.Now == nil {
		cfg.Now = now
	}
	if cfg.Pull == "" {
		// The push tests count and hold requests at the proxy; a pull's
		// long poll would be among them. Pull tests set Pull.
		cfg.Pull = PullOff
	}
	if cfg.Batch == "" {
		// They also count one request per operation; batch tests set
		// Batch.
		cfg.Batch = BatchOff
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Rand == nil {
		r := rand.New(rand.NewPCG(1, 2))
		var mu sync.Mutex
		cfg.Rand = func(n int64) int64 { mu.Lock(); defer mu.Unlock(); return r.Int64N(n) }
	}
	e.d, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !o.noSession {
		acct := o.account
		if acct == "" {
			acct = "alice"
		}
		if err := e.d.SetSession(context.Background(), acct, acct+".1"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.d.Stop(ctx)
		e.proxy.Close()
		e.hs.Close()
		e.client.CloseIdleConnections()
		if err := e.store.Check(); err != nil {
			t.Errorf("queue invariants after test: %v", err)
		}
		e.store.Close()
		if o.keepRemote == nil {
			e.remote.Close()
		}
	})
	return e
}

// apply makes an app write (account alice, type note by default).
func (e *env) apply(w queue.Write) queue.Result {
	e.t.Helper()
	if w.AccountID == "" {
		w.AccountID = "alice"
	}
	if w.EntityType == "" {
		w.EntityType = "note"
	}
	r, err := e.store.Apply(context.Background(), w)
	if err != nil {
		e.t.Fatalf("apply %+v: %v", w, err)
	}
	e.d.Notify()
	return r
}

func (e *env) create(id, data string) queue.Result {
	e.t.Helper()
	return e.apply(queue.Write{Op: queue.OpCreate, EntityID: id, Data: json.RawMessage(data)})
}

func (e *env) update(id, data string) queue.Result {
	e.t.Helper()
	return e.apply(queue.Write{Op: queue.OpUpdate, EntityID: id, Data: json.RawMessage(data)})
}

func (e *env) del(id string) queue.Result {
	e.t.Helper()
	return e.apply(queue.Write{Op: queue.OpDelete, EntityID: id})
}

// drain runs passes until nothing is ready.
func (e *env) drain() int {
	e.t.Helper()
	n, err := e.d.Drain(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) op(id string) queue.Operation {
	e.t.Helper()
	op, err := e.store.GetOperation(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return op
}

func (e *env) entity(id string) queue.Entity {
	e.t.Helper()
	ent, err := e.store.EntityRow("alice", "note", id)
	if err != nil {
		e.t.Fatal(err)
	}
	return ent
}

// serverRecords returns the server's records of alice's note clientID.
func (e *env) serverRecords(clientID string) []remote.Entity {
	e.t.Helper()
	es, err := e.remote.Entities(context.Background(), "alice", "note", clientID)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// oneRecord checks that the server holds exactly one record of clientID
// and returns it.
func (e *env) oneRecord(clientID string) remote.Entity {
	e.t.Helper()
	es := e.serverRecords(clientID)
	if len(es) != 1 {
		e.t.Fatalf("server holds %d records of %s, want 1: %+v", len(es), clientID, es)
	}
	return es[0]
}

func (e *env) wantState(opID string, want queue.State) queue.Operation {
	e.t.Helper()
	op := e.op(opID)
	if op.State != want {
		e.t.Fatalf("operation %s is %s (last error %s: %s), want %s", opID, op.State, op.LastErrorCode, op.LastError, want)
	}
	return op
}

// counter reads a labelled counter of a registry.
func counter(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		total := 0.0
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			}
		}
		return total
	}
	return 0
}

func keyed(key string) func(faultproxy.Entry) bool {
	return func(e faultproxy.Entry) bool { return e.Key == key }
}

func forwardedKey(key string) func(faultproxy.Entry) bool {
	return func(e faultproxy.Entry) bool { return e.Key == key && e.Forwarded }
}

func jsonEq(t testing.TB, got json.RawMessage, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("bad json %s: %v", got, err)
	}
	json.Unmarshal([]byte(want), &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("data %s, want %s", got, want)
	}
}
