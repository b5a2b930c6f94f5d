package daemon

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// TestBatchedDrainUnderFaults: operations go out in batches through a
// proxy that loses answers after the server committed, resets
// connections and answers 503 and 429 to whole batches; in the end every
// operation is done (or, the one with invalid data, failed on its own
// while its batch went on), and the server holds exactly one record of
// each entity with its last data.
func TestBatchedDrainUnderFaults(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 4,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}})
	var n atomic.Int64
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path != transport.BatchPath || n.Add(1) > 24 {
			return faultproxy.Action{Kind: faultproxy.Forward}
		}
		switch n.Load() % 6 {
		case 0:
			return faultproxy.Action{Kind: faultproxy.DropResponse} // committed, answer lost
		case 1:
			return faultproxy.Action{Kind: faultproxy.Reset}
		case 2:
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 503}
		case 3:
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 429}
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	const entities = 120
	for i := range entities {
		e.create(fmt.Sprintf("n%03d", i), fmt.Sprintf(`{"v":%d}`, i))
	}
	for i := 0; i < entities; i += 3 {
		e.update(fmt.Sprintf("n%03d", i), `{"edited":true}`)
	}
	for i := 1; i < entities; i += 10 {
		e.del(fmt.Sprintf("n%03d", i))
	}
	bad := e.create("bad", `{"invalid":true}`)
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.events.wait(t, "everything settled", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StatePending]+st.Counts[queue.StateSending]+st.Counts[queue.StateRetryWaiting] == 0
	})
	e.wantState(bad.Operation.ID, queue.StatePermanentFailed)
	st, _ := e.store.Stats()
	if st.Counts[queue.StatePermanentFailed] != 1 {
		t.Fatalf("counts %v: only the invalid create may fail", st.Counts)
	}
	for i := range entities {
		id := fmt.Sprintf("n%03d", i)
		rec := e.oneRecord(id)
		switch {
		case i%10 == 1:
			if !rec.Deleted {
				t.Errorf("%s not deleted on the server", id)
			}
		case i%3 == 0:
			jsonEq(t, rec.Data, fmt.Sprintf(`{"v":%d,"edited":true}`, i))
		default:
			jsonEq(t, rec.Data, fmt.Sprintf(`{"v":%d}`, i))
		}
	}
	batches, singles := 0, 0
	for _, l := range e.proxy.Log() {
		if l.Request.Path == transport.BatchPath {
			batches++
		} else if l.Request.Method != "GET" {
			singles++
		}
	}
	// A claim that finds one ready operation sends it alone.
	if batches == 0 || singles > batches {
		t.Fatalf("%d batch requests, %d single ones", batches, singles)
	}
	t.Logf("%d batch requests for %d operations", batches, entities+entities/3+entities/10+1)
}

// TestBatchFallsBackWithoutRoute: a remote whose batch route answers 404
// gets single requests, and nothing is lost or sent twice.
func TestBatchFallsBackWithoutRoute(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchAuto}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path == transport.BatchPath {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 404}
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	for i := range 20 {
		e.create(fmt.Sprintf("n%02d", i), `{}`)
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.events.wait(t, "all done", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StateDone] == 20
	})
	for i := range 20 {
		e.oneRecord(fmt.Sprintf("n%02d", i))
	}
	batches := 0
	for _, l := range e.proxy.Log() {
		if strings.HasSuffix(l.Request.Path, "/batch") {
			batches++
		}
	}
	// The workers' first claims (windows of 8: 8, 8 and 4 operations)
	// may each send a batch before the first 404 is seen; after it, an
	// hour of single requests.
	if batches < 1 || batches > DefaultConcurrency {
		t.Fatalf("%d batch requests, want 1 to %d (then an hour of single requests)", batches, DefaultConcurrency)
	}
}

// TestOrderedGroupParentFirst: an ordered batch (an invoice, then its
// lines) reaches the server parent first even when the parent's first
// sends fail, in batches or not; a refused parent keeps its children
// unsent.
func TestOrderedGroupParentFirst(t *testing.T) {
	t.Parallel()
	for _, mode := range []BatchMode{BatchOn, BatchOff} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{realClock: true, cfg: Config{Batch: mode, Concurrency: 4,
				Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}}}})
			group := func(parentData string) []queue.Result {
				ws := []queue.Write{{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: "inv", Data: json.RawMessage(parentData)}}
				for i := range 5 {
					ws = append(ws, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("line%d", i), Data: json.RawMessage(`{"inv":"inv"}`)})
				}
				res, err := e.store.ApplyBatch(t.Context(), ws, true)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			group(`{"total":1}`)
			var parentTries atomic.Int64
			e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
				if strings.Contains(string(r.Body), `"total":1`) && parentTries.Add(1) <= 2 {
					return faultproxy.Action{Kind: faultproxy.Respond, Status: 503}
				}
				return faultproxy.Action{Kind: faultproxy.Forward}
			})
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			e.events.wait(t, "all done", func([]queue.Event) bool {
				st, err := e.store.Stats()
				return err == nil && st.Counts[queue.StateDone] == 6
			})
			// The parent's successful request comes before any request
			// that carries a line.
			parentOK := -1
			for i, l := range e.proxy.Log() {
				body := string(l.Request.Body)
				if strings.Contains(body, `"total":1`) && l.Action == faultproxy.Forward && parentOK < 0 {
					parentOK = i
				}
				if strings.Contains(body, `"inv":"inv"`) && (parentOK < 0 || i < parentOK) {
					t.Fatalf("a line was sent (request %d) before the parent reached the server (%d)", i, parentOK)
				}
			}
			for i := range 5 {
				e.oneRecord(fmt.Sprintf("line%d", i))
			}

			// A refused parent: the lines wait, unsent.
			e2 := setup(t, envOpts{realClock: true, cfg: Config{Batch: mode}})
			ws := []queue.Write{{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: "bad", Data: json.RawMessage(`{"invalid":true}`)},
				{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: "child", Data: json.RawMessage(`{"of":"bad"}`)}}
			res2, err := e2.store.ApplyBatch(t.Context(), ws, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := e2.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			e2.events.wait(t, "the parent refused", func([]queue.Event) bool {
				op, err := e2.store.GetOperation(res2[0].Operation.ID)
				return err == nil && op.State == queue.StatePermanentFailed
			})
			e2.d.Drain(t.Context())
			if op, _ := e2.store.GetOperation(res2[1].Operation.ID); op.State != queue.StatePending || op.AttemptCount != 0 {
				t.Fatalf("the child of a refused parent: %+v", op)
			}
			for _, l := range e2.proxy.Log() {
				if strings.Contains(string(l.Request.Body), `"of":"bad"`) {
					t.Fatal("the child of a refused parent was sent")
				}
			}
		})
	}
}

// TestBatchTooLargeSplits: a proxy in front of the remote refuses batch
// requests over 6 KB with 413, well under the size the remote
// advertises. No operation fails for it: the refused batch's operations
// go alone, later batches stay under half the refused size, and every
// record lands once.
func TestBatchTooLargeSplits(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 2}})
	const limit = 6 << 10
	var refused atomic.Int64
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path == transport.BatchPath && len(r.Body) > limit {
			refused.Add(1)
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 413}
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	const entities = 60
	pad := strings.Repeat("x", 700) // 8 of them are about 6 KB of batch
	for i := range entities {
		e.create(fmt.Sprintf("n%02d", i), fmt.Sprintf(`{"v":%d,"pad":%q}`, i, pad))
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.events.wait(t, "all done", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StateDone] == entities
	})
	st, _ := e.store.Stats()
	if st.Counts[queue.StatePermanentFailed] != 0 {
		t.Fatalf("counts %v: a 413 to a whole batch failed its operations", st.Counts)
	}
	for i := range entities {
		e.oneRecord(fmt.Sprintf("n%02d", i))
	}
	if refused.Load() == 0 {
		t.Fatal("no batch was refused: the test did not test the limit")
	}
	// After the first refusal, batches stay under half of it: at most
	// one refused batch per worker that claimed before it.
	if n := refused.Load(); n > 2 {
		t.Fatalf("%d batches refused, want at most one per worker (2)", n)
	}
	under := 0
	for _, l := range e.proxy.Log() {
		if l.Request.Path == transport.BatchPath && len(l.Request.Body) <= limit {
			under++
		}
	}
	if under == 0 {
		t.Fatal("no batch under the limit was sent after the refusal: the operations all went alone")
	}
}
