package daemon

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/transport"
)

// TestChainedDrainUnderFaults: the updates queued behind a few hot
// entities go out chained in batches (the reference server advertises
// chains) through a proxy that loses answers after the server
// committed, resets connections and answers 503 and 429 to whole
// batches. In the end every operation is done and each record holds its
// last data at exactly the version one create and every update make:
// each update applied once, in order, none refused as a conflict with
// this device's own earlier one.
func TestChainedDrainUnderFaults(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 4,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}})
	const hot, updates = 6, 40
	for i := range hot {
		e.create(fmt.Sprintf("h%d", i), `{"n":0,"keep":"x"}`)
	}
	e.drain()
	var n atomic.Int64
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path != transport.BatchPath || n.Add(1) > 30 {
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
	for k := 1; k <= updates; k++ {
		for i := range hot {
			e.update(fmt.Sprintf("h%d", i), fmt.Sprintf(`{"n":%d,"keep":"x"}`, k))
		}
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	settled(t, e, hot*(updates+1))
	for i := range hot {
		rec := e.oneRecord(fmt.Sprintf("h%d", i))
		jsonEq(t, rec.Data, fmt.Sprintf(`{"n":%d,"keep":"x"}`, updates))
		if rec.Version != updates+1 {
			t.Errorf("h%d at version %d, want %d: an update applied twice or not at all", i, rec.Version, updates+1)
		}
	}
	chained := 0
	for _, l := range e.proxy.Log() {
		if l.Request.Path == transport.BatchPath && bytes.Contains(l.Request.Body, []byte(`"after":`)) {
			chained++
		}
	}
	if chained == 0 {
		t.Fatal("no batch carried a chain")
	}
	// setup's cleanup checks the queue's invariants once the daemon has
	// stopped (a check while it may still write reads a moving file).
}
