package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// waitQuiet waits until no operation is pending, sending or waiting for
// a retry, or the deadline passes; it returns the final counts.
func waitQuiet(t *testing.T, e *env, d time.Duration) map[queue.State]int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, err := e.store.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Counts[queue.StatePending]+st.Counts[queue.StateSending]+st.Counts[queue.StateRetryWaiting] == 0 || time.Now().After(deadline) {
			return st.Counts
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttackChainMergedHead: another device changed another field of
// the record before this device's queued updates went out chained. The
// head is made on an older version and merged by the server (its answer
// holds the other device's field), so the server answers its followers
// 424; they must go again on the version the head produced, field by
// field: every update applied once, no conflict with this device's own
// write, the other device's field kept, the local data the merge.
func TestAttackChainMergedHead(t *testing.T) {
	t.Parallel()
	for _, sameField := range []bool{false} {
		e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 2,
			Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}})
		e.create("h", `{"a":0,"other":"x"}`)
		e.drain()
		const updates = 6
		var ids []string
		for k := 1; k <= updates; k++ {
			ids = append(ids, e.update("h", fmt.Sprintf(`{"a":%d}`, k)).Operation.ID)
		}
		_ = sameField
		if st, b := otherDevice(t, e, "h", 1, `{"a":0,"other":"y"}`, "/other"); st != 200 {
			t.Fatalf("other device: %d %s", st, b)
		}
		if err := e.d.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		counts := waitQuiet(t, e, 10*time.Second)
		for _, id := range ids {
			if op := e.op(id); op.State != queue.StateDone {
				t.Errorf("operation %s is %s (%s: %s), want done", id, op.State, op.LastErrorCode, op.LastError)
			}
		}
		rec := e.oneRecord("h")
		jsonEq(t, rec.Data, fmt.Sprintf(`{"a":%d,"other":"y"}`, updates))
		if rec.Version != 1+1+updates {
			t.Errorf("record at version %d, want %d", rec.Version, 2+updates)
		}
		ent := e.entity("h")
		jsonEq(t, ent.Data, fmt.Sprintf(`{"a":%d,"other":"y"}`, updates))
		if ent.SyncState != queue.SyncSynced {
			t.Errorf("entity %s (%s), want synced", ent.SyncState, ent.SyncError)
		}
		if r := keyReused(e); len(r) > 0 {
			t.Errorf("fingerprint mismatches: %v", r)
		}
		if chainedBatches(e) == 0 {
			t.Error("no chain sent")
		}
		dep := 0
		for _, l := range e.proxy.Log() {
			if l.Request.Path == transport.BatchPath && bytes.Contains(l.ServerBody, []byte("dependency_failed")) {
				dep++
			}
		}
		if dep == 0 {
			t.Error("no follower answered 424 after the merged head")
		}
		t.Logf("counts %v, %d batches with a 424", counts, dep)
	}
}

// rigDrain opens the rig's data directory in this process, drains it
// one request per operation, and closes it.
func rigDrain(t *testing.T, r *crashRig) {
	t.Helper()
	store, err := queue.Open(filepath.Join(r.dir, "syncd.db"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	client, err := transport.New(transport.Config{BaseURL: r.proxy.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseIdleConnections()
	d, err := New(Config{Store: store, Transport: client, Logger: testLogger(t), Pull: PullOff, Batch: BatchOff})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Stop(context.Background())
}

// TestAttackChainKilledAfterCommit: a child daemon sends a chain of
// updates of one record; the server commits all of it and the child is
// SIGKILLed at the head's answer, before recording anything. The
// restart (recoverSending) sends them again, alone (batch off) or
// chained (batch on): each must replay the answer the server stored
// (the same fingerprint however it is sent), and the record must end
// at exactly one version per update.
func TestAttackChainKilledAfterCommit(t *testing.T) {
	t.Parallel()
	for _, mode := range []BatchMode{BatchOff, BatchOn} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			r := newCrashRig(t)
			r.write(t, queue.Write{Op: queue.OpCreate, EntityID: "h", Data: json.RawMessage(`{"n":0,"keep":"k"}`)})
			rigDrain(t, r)
			const updates = 6
			var ws []queue.Write
			for k := 1; k <= updates; k++ {
				ws = append(ws, queue.Write{Op: queue.OpUpdate, EntityID: "h", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, k))})
			}
			res := r.write(t, ws...)
			c := startChild(t, childEnv+"=daemon", childDirEnv+"="+r.dir, childRemoteEnv+"="+r.proxy.URL(),
				childFailpointEnv+"=after-response", childBatchEnv+"="+string(BatchOn))
			line := c.expect(t, "failpoint after-response")
			if !c.died(t) {
				t.Fatalf("child did not die by SIGKILL: %v", c.err)
			}
			t.Logf("%s", line)
			if rec := r.hsRecord(t, "h"); rec.Version != 1+updates {
				t.Fatalf("before the restart the server is at version %d, want the whole chain committed (%d)", rec.Version, 1+updates)
			}
			e := setup(t, envOpts{dir: r.dir, keepRemote: r.remote, realClock: true, cfg: Config{Batch: mode,
				Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}})
			if err := e.store.Check(); err != nil {
				t.Fatal(err)
			}
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			waitQuiet(t, e, 10*time.Second)
			for _, rs := range res {
				if op := e.op(rs.Operation.ID); op.State != queue.StateDone {
					t.Errorf("operation %s is %s (%s: %s)", op.ID, op.State, op.LastErrorCode, op.LastError)
				}
			}
			rec := e.oneRecord("h")
			jsonEq(t, rec.Data, fmt.Sprintf(`{"n":%d,"keep":"k"}`, updates))
			if rec.Version != 1+updates {
				t.Errorf("record at version %d, want %d", rec.Version, 1+updates)
			}
			if ent := e.entity("h"); ent.SyncState != queue.SyncSynced || ent.ServerVersion != 1+updates {
				t.Errorf("entity %s at server version %d", ent.SyncState, ent.ServerVersion)
			}
			if bad := keyReused(e); len(bad) > 0 {
				t.Errorf("fingerprint mismatch on resend: %v", bad)
			}
		})
	}
}

func (r *crashRig) hsRecord(t *testing.T, clientID string) remote.Entity {
	t.Helper()
	es, err := r.remote.Entities(context.Background(), "alice", "note", clientID)
	if err != nil || len(es) != 1 {
		t.Fatalf("records of %s: %v %v", clientID, es, err)
	}
	return es[0]
}

// TestAttackChainLeaseExpires: the worker that sent a chain stalls after
// the answer (before recording anything), longer than its lease; other
// workers take the head back (its lease expired: its followers return
// to pending) and send it and its followers again. Then the first
// worker wakes and records what it got. Whatever the interleaving: every
// operation done, each update applied once and in order, invariants
// hold.
func TestAttackChainLeaseExpires(t *testing.T) {
	t.Parallel()
	for _, stall := range []string{"head", "follower"} {
		t.Run(stall, func(t *testing.T) {
			t.Parallel()
			var stalled atomic.Bool
			var hotIDs sync.Map
			cfg := Config{Batch: BatchOn, Concurrency: 4, Lease: 300 * time.Millisecond,
				Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}
			var hit atomic.Int64
			stallEnded := make(chan struct{})
			cfg.TestHookAfterResponse = func(op queue.Operation, o transport.Outcome) {
				v, ok := hotIDs.Load(op.ID)
				if !ok {
					return
				}
				want := 0
				if stall == "follower" {
					want = 2
				}
				if v.(int) == want && o.Decision == transport.Done && stalled.CompareAndSwap(false, true) {
					hit.Store(int64(v.(int)))
					time.Sleep(900 * time.Millisecond) // the stall itself: thrice the lease
					close(stallEnded)
				}
			}
			e := setup(t, envOpts{realClock: true, cfg: cfg})
			e.create("h", `{"n":0}`)
			e.drain()
			const updates = 10
			var ids []string
			for k := 1; k <= updates; k++ {
				id := e.update("h", fmt.Sprintf(`{"n":%d}`, k)).Operation.ID
				hotIDs.Store(id, k-1)
				ids = append(ids, id)
			}
			// Other traffic keeps the other workers busy claiming.
			for i := range 20 {
				e.create(fmt.Sprintf("o%d", i), `{"x":1}`)
			}
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			// The stalled worker's late outcome lands before the queue is
			// judged.
			select {
			case <-stallEnded:
			case <-time.After(10 * time.Second):
				t.Fatal("the stall never happened")
			}
			counts := waitQuiet(t, e, 10*time.Second)
			if !stalled.Load() {
				t.Fatal("the stall never happened")
			}
			for _, id := range ids {
				if op := e.op(id); op.State != queue.StateDone {
					t.Errorf("operation %s is %s (%s: %s)", id, op.State, op.LastErrorCode, op.LastError)
				}
			}
			rec := e.oneRecord("h")
			jsonEq(t, rec.Data, fmt.Sprintf(`{"n":%d}`, updates))
			if rec.Version != 1+updates {
				t.Errorf("record at version %d, want %d", rec.Version, 1+updates)
			}
			if bad := keyReused(e); len(bad) > 0 {
				t.Errorf("fingerprint mismatch: %v", bad)
			}
			t.Logf("stalled at %d; counts %v; %d chained batches", hit.Load(), counts, chainedBatches(e))
		})
	}
}

// TestAttackChainTwoDevices: two devices of one account edit one
// record, each a different field, many times; each device's updates
// queue up behind a held send and go out chained at once, so the
// chains meet on the server (merged heads, 424s, followers sent again
// alone). Both converge to the server's record, which holds both
// devices' last values at exactly one version per update; nothing is
// left in conflict or failed.
func TestAttackChainTwoDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons with pulls: about 30 s")
	}
	t.Parallel()
	cfg := func() Config {
		return Config{Batch: BatchOn, Pull: PullOn, Concurrency: 2,
			Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}
	}
	a := setup(t, envOpts{realClock: true, cfg: cfg()})
	b := setup(t, envOpts{realClock: true, cfg: cfg(), keepRemote: a.remote})
	a.create("h", `{"a":0,"b":0,"c":"x"}`)
	a.drain()
	var open atomic.Bool
	for _, e := range []*env{a, b} {
		e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
			if !open.Load() && (r.Method == "PATCH" || r.Path == transport.BatchPath) {
				// Not now: the updates queue up, then go chained.
				return faultproxy.Action{Kind: faultproxy.Respond, Status: 503, RetryAfter: "1"}
			}
			return faultproxy.Action{Kind: faultproxy.Forward}
		})
		if err := e.d.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := b.store.EntityRow("alice", "note", "h"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b never pulled h")
		}
		time.Sleep(10 * time.Millisecond)
	}
	const updates = 12
	for k := 1; k <= updates; k++ {
		a.update("h", fmt.Sprintf(`{"a":%d}`, k))
		b.update("h", fmt.Sprintf(`{"b":%d}`, k))
		time.Sleep(2 * time.Millisecond)
	}
	open.Store(true)
	waitQuiet(t, a, 15*time.Second)
	waitQuiet(t, b, 15*time.Second)
	want := fmt.Sprintf(`{"a":%d,"b":%d,"c":"x"}`, updates, updates)
	rec := a.oneRecord("h")
	jsonEq(t, rec.Data, want)
	if rec.Version != 1+2*updates {
		t.Errorf("record at version %d, want %d", rec.Version, 1+2*updates)
	}
	for name, e := range map[string]*env{"a": a, "b": b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ent := e.entity("h")
			if ent.SyncState == queue.SyncSynced && ent.ServerVersion == rec.Version {
				jsonEq(t, ent.Data, want)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("device %s: entity %s (%s) at server version %d, data %s; server at %d", name, ent.SyncState, ent.SyncError, ent.ServerVersion, ent.Data, rec.Version)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		st, _ := e.store.Stats()
		if st.Counts[queue.StatePermanentFailed] > 0 {
			t.Errorf("device %s: %v", name, st.Counts)
		}
		if bad := keyReused(e); len(bad) > 0 {
			t.Errorf("device %s: fingerprint mismatch: %v", name, bad)
		}
		t.Logf("device %s: %d chained batches", name, chainedBatches(e))
		if testing.Verbose() {
			for _, l := range e.proxy.Log() {
				if l.Request.Method != "GET" {
					t.Logf("  %s %s %v %d %.300s", l.Request.Method, l.Request.Path, l.Action, l.ServerStatus, l.Request.Body)
				}
			}
		}
	}
}

// chainedBatches counts the batch requests that carried a chain.
func chainedBatches(e *env) int {
	n := 0
	for _, l := range e.proxy.Log() {
		if l.Request.Path == transport.BatchPath && bytes.Contains(l.Request.Body, []byte(`"after":`)) {
			n++
		}
	}
	return n
}

// keyReused reports any answer the server gave with
// idempotency_key_reused (a resend whose fingerprint differs).
func keyReused(e *env) []string {
	var out []string
	for _, l := range e.proxy.Log() {
		if bytes.Contains(l.ServerBody, []byte("idempotency_key_reused")) || bytes.Contains(l.ServerBody, []byte("payload_conflict")) {
			out = append(out, fmt.Sprintf("%s %s: %s", l.Request.Method, l.Request.Path, l.ServerBody))
		}
	}
	return out
}

// otherDevice writes to the server directly, as another device of
// alice: a PATCH of clientID's record on baseVersion with paths.
func otherDevice(t *testing.T, e *env, clientID string, base int64, data string, paths ...string) (int, string) {
	t.Helper()
	rec := e.oneRecord(clientID)
	body, _ := json.Marshal(map[string]any{"data": json.RawMessage(data), "baseVersion": base, "paths": paths, "payloadVersion": 1})
	req, _ := http.NewRequestWithContext(context.Background(), "PATCH", e.hs.URL+"/v1/note/"+rec.ID, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer alice.2")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("other-%d", time.Now().UnixNano()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
