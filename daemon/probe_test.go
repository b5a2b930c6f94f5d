package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// probeCfg probes every few milliseconds of real time, and backs a
// failed operation off by an hour of the test's clock, which does not
// move: without a probe nothing would be sent again during a test.
func probeCfg() Config {
	return Config{
		ProbeInterval: 5 * time.Millisecond,
		Policy:        transport.Policy{Backoff: transport.Backoff{Base: time.Hour, Max: time.Hour}},
		Rand:          func(n int64) int64 { return n - 1 },
	}
}

func isProbe(e faultproxy.Entry) bool { return e.Method == http.MethodHead }

func opDone(id string) func([]queue.Event) bool {
	return func(es []queue.Event) bool {
		for _, ev := range es {
			if ev.Type == queue.EventOperationState && ev.OperationID == id && ev.State == queue.StateDone {
				return true
			}
		}
		return false
	}
}

// networkSwitch makes the proxy reset every request while the switch it
// returns is on.
func networkSwitch(e *env) *atomic.Bool {
	var offline atomic.Bool
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if offline.Load() {
			return faultproxy.Action{Kind: faultproxy.Reset}
		}
		return faultproxy.Action{}
	})
	return &offline
}

// reconnectAfterFailedProbe waits until a probe has failed, brings the
// network back, and waits until operation id is done and its entity
// clientID is on the server once.
func (e *env) reconnectAfterFailedProbe(offline *atomic.Bool, id, clientID string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failedProbe := func(log []faultproxy.Entry) bool {
		return faultproxy.Count(log, func(e faultproxy.Entry) bool { return isProbe(e) && e.Action == faultproxy.Reset }) > 0
	}
	if err := e.proxy.Wait(ctx, failedProbe); err != nil {
		e.t.Fatalf("waiting for a probe while offline: %v", err)
	}
	offline.Store(false)
	e.events.wait(e.t, id+" done", opDone(id))
	e.oneRecord(clientID)
}

// waitsLong checks that an operation waits far beyond the test's time.
func (e *env) waitsLong(id string) {
	e.t.Helper()
	if op := e.wantState(id, queue.StateRetryWaiting); op.NextAttemptAt.Sub(e.clock.Now()) < 30*time.Minute {
		e.t.Fatalf("%s: next attempt in %v, want an hour", id, op.NextAttemptAt.Sub(e.clock.Now()))
	}
}

// While the remote is unreachable the daemon probes it; when a probe that
// failed is followed by one that gets an answer, what waited goes at
// once, an hour before its backoff ends.
func TestProbeEndsOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	offline := networkSwitch(e)
	e.create("n0", `{"v":0}`) // the first success since start
	e.drain()
	offline.Store(true)
	n1 := e.create("n1", `{"v":1}`).Operation.ID
	e.drain()
	e.waitsLong(n1)

	start := e.clock.Now()
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.reconnectAfterFailedProbe(offline, n1, "n1")
	if !e.clock.Now().Equal(start) {
		t.Fatal("the clock moved")
	}
	if st, _ := e.d.Status(t.Context()); !st.Online {
		t.Error("status: offline after the outage ended")
	}
}

// An operation that fails by itself while the remote answers probes keeps
// its backoff: a probe's answer ends no outage unless a probe failed
// first (or the outage lasted reconnectMinOutage).
func TestProbeKeepsBackoffOfOneFailingOp(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(string(r.Body), `"bad"`) {
			return faultproxy.Action{Kind: faultproxy.Reset}
		}
		return faultproxy.Action{}
	})
	e.create("n0", `{"v":0}`)
	e.drain()
	bad := e.create("bad", `{"v":1}`).Operation.ID
	e.drain()
	e.waitsLong(bad)

	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The probe's answer turns the daemon online again (a third
	// connectivity event: online, offline, online).
	e.events.wait(t, "online after a probe", func(es []queue.Event) bool {
		var online []bool
		for _, ev := range es {
			if ev.Type == EventConnectivityChanged {
				var d struct{ Online bool }
				json.Unmarshal(ev.Data, &d)
				online = append(online, d.Online)
			}
		}
		return len(online) == 3 && online[2]
	})
	e.d.Stop(t.Context()) // the probe and anything it started have ended
	e.waitsLong(bad)
	if op := e.op(bad); op.AttemptCount != 1 {
		t.Fatalf("the failing op was sent %d times, want once", op.AttemptCount)
	}
	if n := faultproxy.Count(e.proxy.Log(), isProbe); n == 0 {
		t.Fatal("no probe was made")
	}
}

// A daemon started over a queue that holds backoffs from a run that was
// offline probes once; the remote answers, and what waited goes.
func TestProbeAtStartSendsBacklog(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	offline := networkSwitch(e)
	offline.Store(true)
	n1 := e.create("n1", `{"v":1}`).Operation.ID
	e.drain() // the previous run: offline
	e.waitsLong(n1)
	offline.Store(false)

	cfg := probeCfg()
	cfg.Store, cfg.Transport, cfg.Now, cfg.Logger = e.store, e.client, e.clock.Now, testLogger(t)
	cfg.Pull = PullOff // a read of the feed would find the remote too
	d2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.Stop(context.Background()) })
	e.events.wait(t, "n1 done", opDone(n1))
	e.oneRecord("n1")
	if n := faultproxy.Count(e.proxy.Log(), isProbe); n != 1 {
		t.Errorf("%d probes, want 1", n)
	}
}

// The prober keeps a probe scheduled while the remote is not known to
// answer, the session may send and operations are queued; it probes when
// none of them is ready to go (a send is a probe too).
func TestProbeArmedAndWanted(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	if e.d.probeArmed() {
		t.Error("armed with an empty queue")
	}
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action { return faultproxy.Action{Kind: faultproxy.Reset} })
	n1 := e.create("n1", `{"v":1}`).Operation.ID
	if !e.d.probeArmed() || e.d.probeWanted() {
		t.Error("an operation ready to go: want armed, and its send as the probe")
	}
	e.drain()
	e.waitsLong(n1)
	if !e.d.probeArmed() || !e.d.probeWanted() {
		t.Error("offline with an operation waiting: want a probe")
	}
	if _, err := e.d.Logout(t.Context(), LogoutKeep, false); err != nil {
		t.Fatal(err)
	}
	if e.d.probeArmed() {
		t.Error("armed while signed out")
	}
}

// With backoffs shorter than the probe interval at first, as the
// defaults are (1 s against 5 s), the prober still probes once they grow:
// it stays armed through the outage and does not wait for a write.
func TestProbeWithShortBackoff(t *testing.T) {
	t.Parallel()
	cfg := probeCfg()
	cfg.Policy.Backoff = transport.Backoff{Base: time.Millisecond, Max: time.Hour}
	cfg.ProbeInterval = 20 * time.Millisecond
	e := setup(t, envOpts{cfg: cfg})
	offline := networkSwitch(e)
	e.create("n0", `{"v":0}`)
	e.drain()
	offline.Store(true)
	n1 := e.create("n1", `{"v":1}`).Operation.ID
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.reconnectAfterFailedProbe(offline, n1, "n1")
}

// probeFunc is a Prober.
type probeFunc func(ctx context.Context) (int, error)

func (f probeFunc) Probe(ctx context.Context) (int, error) { return f(ctx) }

// A probe that fails after a send got an answer says nothing new: the
// daemon stays online, and no outage is confirmed for the next success.
func TestProbeFailureOvertakenByAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	e.d.observe(false, false, false) // offline after a send's network error
	e.d.probe(t.Context(), probeFunc(func(context.Context) (int, error) {
		e.d.observe(true, false, false) // meanwhile a send gets a 503
		return 0, errors.New("connection reset")
	}))
	e.d.onlineMu.Lock()
	online, failed := e.d.online, e.d.probeFailed
	e.d.onlineMu.Unlock()
	if !online || failed {
		t.Fatalf("after a stale probe failure: online %v, probe failure recorded %v", online, failed)
	}
	// A probe failure not overtaken counts.
	e.d.observe(false, false, false)
	e.d.probe(t.Context(), probeFunc(func(context.Context) (int, error) { return 0, errors.New("connection reset") }))
	e.d.onlineMu.Lock()
	online, failed = e.d.online, e.d.probeFailed
	e.d.onlineMu.Unlock()
	if online || !failed {
		t.Fatalf("after a probe failure: online %v, probe failure recorded %v", online, failed)
	}
}

// probingSender sends through a real transport and probes with probe.
type probingSender struct {
	*transport.Client
	probe probeFunc
}

func (s probingSender) Probe(ctx context.Context) (int, error) { return s.probe(ctx) }

// Stop does not wait for a probe in flight: it is canceled.
func TestStopCancelsProbe(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: probeCfg()})
	networkSwitch(e).Store(true)
	n1 := e.create("n1", `{"v":1}`).Operation.ID
	probing := make(chan struct{})
	var once sync.Once
	cfg := probeCfg()
	cfg.Store, cfg.Now, cfg.Logger = e.store, e.clock.Now, testLogger(t)
	cfg.Transport = probingSender{e.client, func(ctx context.Context) (int, error) {
		once.Do(func() { close(probing) })
		<-ctx.Done() // a remote that never answers, with no timeout
		return 0, ctx.Err()
	}}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(t.Context()); err != nil { // offline, n1 waits an hour
		t.Fatal(err)
	}
	e.waitsLong(n1)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-probing:
	case <-time.After(30 * time.Second):
		t.Fatal("no probe while offline")
	}
	stopped := make(chan struct{})
	go func() {
		d.Stop(context.Background()) // no deadline: only the probe could hold it
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop waited for a probe in flight")
	}
}

// TestOfflineHoldsTheQueue: while the remote does not answer, the
// workers do not claim and fail the ready operations one by one (each
// its own attempt, commit and backoff): only the prober tries the
// remote. The moment a probe is answered, everything goes.
func TestOfflineHoldsTheQueue(t *testing.T) {
	t.Parallel()
	cfg := probeCfg()
	// Failed operations would wait an hour of a clock that does not
	// move: without the hold, every ready one would still be tried once.
	e := setup(t, envOpts{cfg: cfg})
	offline := networkSwitch(e)
	e.create("n0", `{"v":0}`) // the first success since start
	e.drain()
	offline.Store(true)
	const queued = 200
	ids := make([]string, queued)
	for i := range queued {
		ids[i] = e.create(fmt.Sprintf("n%d", i+1), `{"v":1}`).Operation.ID
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Ten probes failed: the daemon has been offline for a while.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	probes := func(log []faultproxy.Entry) bool {
		return faultproxy.Count(log, func(e faultproxy.Entry) bool { return isProbe(e) && e.Action == faultproxy.Reset }) >= 10
	}
	if err := e.proxy.Wait(ctx, probes); err != nil {
		t.Fatalf("waiting for probes: %v", err)
	}
	// The sends in flight when the outage began, each maybe twice (net/http
	// sends a request again once when a kept-alive connection dies).
	writes := faultproxy.Count(e.proxy.Log(), func(e faultproxy.Entry) bool {
		return !isProbe(e) && e.Method != http.MethodGet && e.Action == faultproxy.Reset
	})
	if limit := 2 * e.d.conc; writes > limit {
		t.Errorf("%d write attempts while offline, want at most %d", writes, limit)
	}
	if st, err := e.store.Stats(); err != nil || st.Counts[queue.StateRetryWaiting] > e.d.conc {
		t.Errorf("stats %+v %v: at most %d attempted", st.Counts, err, e.d.conc)
	}
	offline.Store(false)
	e.events.wait(t, "all done", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StateDone] == queued+1
	})
}
