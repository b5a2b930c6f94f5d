package daemon

import (
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
	if batches != 1 {
		t.Fatalf("%d batch requests, want 1 (then an hour of single requests)", batches)
	}
}
