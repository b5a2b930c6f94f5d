package daemon

// The crash rows of DESIGN.md's failure table: a real daemon (or server)
// process SIGKILLed at a named failpoint and restarted on the same data
// directory.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
)

// crashRig is a reference server and a fault proxy that outlive the
// daemon processes of one test.
type crashRig struct {
	dir    string
	remote *remote.Server
	hs     *httptest.Server
	proxy  *faultproxy.Proxy
}

func newCrashRig(t *testing.T) *crashRig {
	t.Helper()
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	r := &crashRig{dir: t.TempDir()}
	var err error
	if r.remote, err = remote.New(remote.Config{DataDir: t.TempDir(), DevTokens: true}); err != nil {
		t.Fatal(err)
	}
	r.hs = httptest.NewServer(r.remote.Handler())
	if r.proxy, err = faultproxy.New(r.hs.URL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.proxy.Close()
		r.hs.Close()
		r.remote.Close()
	})
	return r
}

// write opens the data directory's queue, applies writes and closes it.
func (r *crashRig) write(t *testing.T, ws ...queue.Write) []queue.Result {
	t.Helper()
	s, err := queue.Open(filepath.Join(r.dir, "syncd.db"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []queue.Result
	for _, w := range ws {
		w.AccountID, w.EntityType = "alice", "note"
		res, err := s.Apply(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	return out
}

func (r *crashRig) daemonChild(t *testing.T, failpoint string) *child {
	return startChild(t, childEnv+"=daemon", childDirEnv+"="+r.dir, childRemoteEnv+"="+r.proxy.URL(), childFailpointEnv+"="+failpoint)
}

// restart opens the data directory in this process, as the restarted
// daemon, against the same server.
func (r *crashRig) restart(t *testing.T) *env {
	return setup(t, envOpts{dir: r.dir, keepRemote: r.remote, realClock: true})
}

// Row "right after an op turns sending": the daemon dies right after the
// claim committed; on restart the op is pending again and is sent once.
func TestCrashAfterClaim(t *testing.T) {
	t.Parallel()
	r := newCrashRig(t)
	res := r.write(t, queue.Write{Op: queue.OpCreate, EntityID: "n1", Data: json.RawMessage(`{"v":1}`)})
	opID := res[0].Operation.ID
	c := r.daemonChild(t, "after-claim")
	if line := c.expect(t, "failpoint after-claim"); !strings.HasSuffix(line, opID) {
		t.Fatalf("failpoint at %q, want %s", line, opID)
	}
	if !c.died(t) {
		t.Fatalf("child did not die by SIGKILL: %v", c.err)
	}
	if n := len(r.proxy.Log()); n != 0 {
		t.Fatalf("%d requests reached the proxy before the kill", n)
	}

	e := r.restart(t)
	op := e.wantState(opID, queue.StatePending) // recovered by Open
	if op.AttemptCount != 1 {
		t.Errorf("attempts %d, want the killed one counted", op.AttemptCount)
	}
	e.drain()
	e.wantState(opID, queue.StateDone)
	rec := e.oneRecord("n1")
	if ent := e.entity("n1"); ent.ServerID != rec.ID || ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %+v", ent)
	}
}

// Row "response received, before local reconciliation": the server
// committed and answered, the daemon died before recording it; on
// restart the resend is replayed and reconciles; one record.
func TestCrashAfterResponse(t *testing.T) {
	t.Parallel()
	r := newCrashRig(t)
	res := r.write(t,
		queue.Write{Op: queue.OpCreate, EntityID: "n1", Data: json.RawMessage(`{"v":1}`)},
	)
	opID := res[0].Operation.ID
	c := r.daemonChild(t, "after-response")
	if line := c.expect(t, "failpoint after-response"); !strings.HasPrefix(line, "failpoint after-response "+opID+" 201") {
		t.Fatalf("failpoint at %q", line)
	}
	if !c.died(t) {
		t.Fatalf("child did not die by SIGKILL: %v", c.err)
	}
	e := r.restart(t)
	e.wantState(opID, queue.StatePending)
	first := e.oneRecord("n1")
	replays := counter(t, r.remote.Registry(), "idempotency_replays_total", "operation", "create")
	e.drain()
	e.wantState(opID, queue.StateDone)
	if rec := e.oneRecord("n1"); rec.ID != first.ID {
		t.Fatalf("record changed: %s, was %s", rec.ID, first.ID)
	}
	if ent := e.entity("n1"); ent.ServerID != first.ID || ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %+v", ent)
	}
	if got := counter(t, r.remote.Registry(), "idempotency_replays_total", "operation", "create"); got != replays+1 {
		t.Errorf("server replays %v, want %v", got, replays+1)
	}
}

// Row "server crashed while reserving": the reference server dies after
// reserving the key, before committing; the restarted server holds no
// stuck processing record, so the daemon's retry runs once and makes one
// record.
func TestCrashServerWhileReserving(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns subprocesses; run without -short")
	}
	e := setup(t, envOpts{})
	remoteDir := t.TempDir()
	a := startChild(t, childEnv+"=remote", childDirEnv+"="+remoteDir, childFailpointEnv+"=kill-after-reserve")
	e.proxy.SetTarget(strings.TrimPrefix(a.expect(t, "listening "), "listening "))
	c := e.create("n1", `{"v":1}`)
	e.drain()
	a.expect(t, "failpoint kill-after-reserve")
	if !a.died(t) {
		t.Fatalf("server child did not die by SIGKILL: %v", a.err)
	}
	op := e.wantState(c.Operation.ID, queue.StateRetryWaiting)

	b := startChild(t, childEnv+"=remote", childDirEnv+"="+remoteDir)
	url := strings.TrimPrefix(b.expect(t, "listening "), "listening ")
	e.proxy.SetTarget(url)
	e.clock.Advance(op.NextAttemptAt.Sub(e.clock.Now()))
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	log := e.proxy.Log()
	last := log[len(log)-1]
	if last.ServerStatus != 201 {
		t.Fatalf("retry after the crash answered %d %s, want 201", last.ServerStatus, last.ServerBody)
	}
	req, _ := http.NewRequest("GET", url+"/v1/note?clientId=n1", nil)
	req.Header.Set("Authorization", "Bearer alice.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var list struct{ Items []remote.Entity }
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("server records of n1: %s (%v)", body, err)
	}
	if ent := e.entity("n1"); ent.ServerID != list.Items[0].ID {
		t.Errorf("entity server id %q, record %q", ent.ServerID, list.Items[0].ID)
	}
	http.DefaultClient.CloseIdleConnections()
}

// Row "after the entity write, before the queue write": impossible, one
// transaction. A daemon process killed while apps write and it sends
// leaves a file where every invariant holds (each pending entity has its
// operation); restarted, it finishes the job. A small soak.
func TestCrashDuringWrites(t *testing.T) {
	t.Parallel()
	runSoak(t, soakConfig{writers: 2, entities: 30, kills: 2})
}

// TestSoak: concurrent writers create, update and delete entities while
// the proxy injects faults and the daemon is SIGKILLed and restarted;
// at the end every entity is synced, the server holds one record per
// created entity with its final data, and no operation is lost or stuck.
// SYNCD_SOAK=1 makes it long.
func TestSoak(t *testing.T) {
	t.Parallel()
	cfg := soakConfig{writers: 4, entities: 60, kills: 4}
	if os.Getenv("SYNCD_SOAK") == "1" {
		cfg = soakConfig{writers: 8, entities: 400, kills: 10}
	}
	runSoak(t, cfg)
}

type soakConfig struct {
	writers, entities, kills int
	batch                    bool // the children send in batches
}

// TestSoakBatched is TestSoak with batched sends: the faults (resets,
// answers lost after the server committed, 503, 429, delays) and the
// SIGKILLs hit whole batches.
func TestSoakBatched(t *testing.T) {
	t.Parallel()
	cfg := soakConfig{writers: 4, entities: 60, kills: 4, batch: true}
	if os.Getenv("SYNCD_SOAK") == "1" {
		cfg = soakConfig{writers: 8, entities: 400, kills: 10, batch: true}
	}
	runSoak(t, cfg)
}

func runSoak(t *testing.T, cfg soakConfig) {
	r := newCrashRig(t)
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	t.Logf("soak seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	faultRnd := rand.New(rand.NewPCG(seed, 2)) // the rule runs on the proxy's goroutines, one at a time
	r.proxy.SetRule(func(req faultproxy.Request) faultproxy.Action {
		var a faultproxy.Action
		switch p := faultRnd.IntN(100); {
		case p < 6:
			a = faultproxy.Action{Kind: faultproxy.Reset}
		case p < 12:
			a = faultproxy.Action{Kind: faultproxy.DropResponse}
		case p < 16:
			a = faultproxy.Action{Kind: faultproxy.Respond, Status: 503}
		case p < 17:
			a = faultproxy.Action{Kind: faultproxy.Respond, Status: 429, RetryAfter: "1"}
		case p < 20:
			a = faultproxy.Action{Kind: faultproxy.Delay, Delay: 20 * time.Millisecond}
		}
		return a
	})
	script := 0
	for w := range cfg.writers {
		script += len(soakScript(w, cfg.entities))
	}
	soakEnv := fmt.Sprintf("%s=%d,%d", childSoakEnv, cfg.writers, cfg.entities)
	kills := 0
	for round := 0; ; round++ {
		env := []string{childEnv + "=soak", childDirEnv + "=" + r.dir, childRemoteEnv + "=" + r.proxy.URL(), soakEnv}
		if cfg.batch {
			env = append(env, childBatchEnv+"="+string(BatchOn))
		}
		c := startChild(t, env...)
		c.expect(t, "ready")
		if kills < cfg.kills {
			// Kill after a random number of acknowledged writes, or
			// while it drains once everything is written.
			target := 1 + rnd.IntN(max(1, script/25/cfg.kills))
			for range target {
				if line := c.expect(t, ""); strings.HasPrefix(line, "written") || strings.HasPrefix(line, "drained") {
					break
				}
			}
			c.kill()
			kills++
			// The file holds every invariant after the kill.
			s, err := queue.Open(filepath.Join(r.dir, "syncd.db"), queue.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("round %d: invariants after SIGKILL: %v", round, err)
			}
			s.Close()
			continue
		}
		c.expect(t, "drained")
		<-c.exited
		if c.err != nil {
			t.Fatalf("last child: %v", c.err)
		}
		break
	}

	// Every operation of the script is done, every entity where it should
	// be, and the server holds one record per entity with its final data.
	s, err := queue.Open(filepath.Join(r.dir, "syncd.db"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	ops := 0
	for w := range cfg.writers {
		for _, wr := range soakScript(w, cfg.entities) {
			op, err := s.GetOperation(wr.OperationID)
			if err != nil {
				t.Fatalf("operation %s lost: %v", wr.OperationID, err)
			}
			if op.State != queue.StateDone {
				t.Errorf("operation %s is %s", op.ID, op.State)
			}
			ops++
		}
		for i := range cfg.entities {
			id := fmt.Sprintf("w%d-e%d", w, i)
			data, deleted := soakFinal(w, i)
			recs, err := r.remote.Entities(context.Background(), "alice", "note", id)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("server holds %d records of %s", len(recs), id)
			}
			if string(recs[0].Data) != data || recs[0].Deleted != deleted {
				t.Errorf("server record of %s: %s deleted=%v, want %s deleted=%v", id, recs[0].Data, recs[0].Deleted, data, deleted)
			}
			ent, err := s.EntityRow("alice", "note", id)
			switch {
			case deleted && err == nil:
				t.Errorf("entity %s still stored after its delete was done", id)
			case !deleted && err != nil:
				t.Errorf("entity %s: %v", id, err)
			case !deleted && (ent.SyncState != queue.SyncSynced || ent.ServerID != recs[0].ID):
				t.Errorf("entity %s: %s server id %q, want synced %q", id, ent.SyncState, ent.ServerID, recs[0].ID)
			}
		}
	}
	st, _ := s.Stats()
	log := r.proxy.Log()
	faults := map[faultproxy.Kind]int{}
	for _, le := range log {
		faults[le.Action]++
	}
	fmt.Fprintf(os.Stderr, "soak: %d writers, %d entities, %d operations all done in %v; %d SIGKILLs; %d requests (%d forwarded); faults: reset %d, dropped responses %d, 503 %d+429 %d, delay %d; server replays %v; queue %v\n",
		cfg.writers, cfg.writers*cfg.entities, ops, time.Since(start).Round(time.Millisecond), kills, len(log),
		faultproxy.Count(log, faultproxy.Forwarded), faults[faultproxy.Reset], faults[faultproxy.DropResponse],
		countStatus(log, 503), countStatus(log, 429), faults[faultproxy.Delay],
		counter(t, r.remote.Registry(), "idempotency_replays_total", "", ""), st.Counts)
}

func countStatus(log []faultproxy.Entry, status int) int {
	return faultproxy.Count(log, func(e faultproxy.Entry) bool { return e.Action == faultproxy.Respond && e.Status == status })
}
